//! The decision path of DESIGN §1, without I/O: the caller passes the server time and the stores.
//!
//! ```text
//! edge rules → signature → time window → nonce dedup → fingerprint → gateway rules → business rules
//! ```
//!
//! Every step before the nonce store is pure computation, so a forged request costs Rampart no
//! storage: a request with a bad signature or a stale timestamp never reaches the nonce store and so
//! never consumes its nonce.

mod steps;

use std::collections::HashMap;
use std::ops::ControlFlow::{Break, Continue};
use std::sync::Arc;

use crate::challenge::ChallengeConfig;
use crate::model::Arm;
use crate::model::{Action, Code, DecideRequest, Reason, Step, Verdict};
use crate::path::PathError;
use crate::policy::{AppPolicy, DedupPolicy, FailPolicy, RoutePolicy, StorePolicies, Tier};
use crate::replay::canonical::{body_sha256_hex, is_sha256_hex, EMPTY_BODY_SHA256};
use crate::replay::fingerprint::FingerprintStore;
use crate::replay::keys::Keyring;
use crate::replay::nonce::NonceStore;
use crate::rollout::{Candidate, DynamicLists, ListAction};
use crate::rules::{DecisionContext, LiveRules, Req, RuleSession, RuleSet};
use crate::store::StoreError;

/// In-process stores consulted while the shared ones fail (and kept up to date while they work),
/// so that an instance still catches the replays it has seen itself during an outage.
pub struct Fallback {
    pub nonces: Arc<dyn NonceStore>,
    pub fingerprints: Arc<dyn FingerprintStore>,
}

/// An error of the API call itself (not a decision): answered 4xx with `{"error":{code,message}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("unknown app {0:?}")]
    UnknownApp(String),
    #[error("{0}")]
    InvalidField(String),
    #[error("the anti-replay header {0} appears more than once (names differing only in case count as one)")]
    DuplicateHeader(&'static str),
}

impl RequestError {
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::UnknownApp(_) => "UNKNOWN_APP",
            RequestError::InvalidField(_) => "INVALID_FIELD",
            RequestError::DuplicateHeader(_) => "DUPLICATE_HEADER",
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            RequestError::UnknownApp(_) => 404,
            RequestError::InvalidField(_) | RequestError::DuplicateHeader(_) => 400,
        }
    }
}

/// Everything the decision path needs, built once from configuration.
pub struct Engine {
    apps: HashMap<String, AppPolicy>,
    routes: Vec<RoutePolicy>,
    default_dedup: DedupPolicy,
    on_store_error: StorePolicies,
    challenge_status: u16,
    nonces: Arc<dyn NonceStore>,
    fingerprints: Arc<dyn FingerprintStore>,
    fallback: Option<Fallback>,
    rules: Arc<LiveRules>,
    /// The rule set being rolled out beside the stable one, if any.
    candidate: arc_swap::ArcSwapOption<Candidate>,
    /// Block and allow lists edited at run time.
    lists: arc_swap::ArcSwap<DynamicLists>,
    /// The restart quarantine: timestamps whose acceptance span began before this instant (Unix
    /// ms) cannot be judged (`i64::MIN`: none). See [`Engine::set_restart_quarantine`].
    judge_from_ms: std::sync::atomic::AtomicI64,
    /// Proof-of-work challenges and clearances.
    challenge: ChallengeConfig,
}

/// What the anti-replay steps need from the request besides the context: its body's hash and a
/// verified proof-of-work solution to record as used.
#[derive(Clone, Copy)]
struct Carried<'a> {
    body_hash: &'a str,
    solution: Option<&'a crate::challenge::Solved>,
}

/// What the request's challenge headers proved, before the tiers run.
enum Pass {
    None,
    /// A verified solution, to be consumed after the nonce step.
    Solution(crate::challenge::Solved),
    Clearance,
}

/// Settings of the decision path that are not stores.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub apps: Vec<AppPolicy>,
    pub routes: Vec<RoutePolicy>,
    pub default_dedup: DedupPolicy,
    pub on_store_error: StorePolicies,
    pub challenge_status: u16,
}

impl Engine {
    pub fn new(
        settings: EngineSettings,
        nonces: Arc<dyn NonceStore>,
        fingerprints: Arc<dyn FingerprintStore>,
        rules: Arc<LiveRules>,
    ) -> Self {
        Engine {
            apps: settings
                .apps
                .into_iter()
                .map(|a| (a.id.clone(), a))
                .collect(),
            routes: settings.routes,
            default_dedup: settings.default_dedup,
            on_store_error: settings.on_store_error,
            challenge_status: settings.challenge_status,
            nonces,
            fingerprints,
            fallback: None,
            rules,
            candidate: arc_swap::ArcSwapOption::empty(),
            lists: arc_swap::ArcSwap::from_pointee(DynamicLists::default()),
            judge_from_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
            challenge: ChallengeConfig::default(),
        }
    }

    /// The challenge settings (keys, default difficulty, lifetimes, binding).
    pub fn with_challenge(mut self, c: ChallengeConfig) -> Self {
        self.challenge = c;
        self
    }

    pub fn challenge_config(&self) -> &ChallengeConfig {
        &self.challenge
    }

    /// Checks `x-rampart-solution` or `x-rampart-clearance`, statelessly (no store is touched
    /// before the signature): a bad one is refused here with `CHALLENGE_FAILED`.
    fn challenge_pass(&self, req: &DecideRequest, now_ms: i64) -> Result<Pass, Box<Verdict>> {
        use crate::challenge::{subject, CLEARANCE_HEADER, SOLUTION_HEADER};
        let [solution, clearance] = req.request.headers_of([SOLUTION_HEADER, CLEARANCE_HEADER]);
        if solution.is_none() && clearance.is_none() {
            return Ok(Pass::None);
        }
        let c = &self.challenge;
        let who = subject(
            c.binding,
            req.client.device_id.as_deref(),
            req.client.ip.as_deref(),
        );
        let checked = match (solution, clearance) {
            (Some(s), _) => c
                .verify_solution(s, &req.app, who, now_ms)
                .map(Pass::Solution),
            (None, Some(t)) => c
                .verify_clearance(t, &req.app, who, now_ms)
                .map(|()| Pass::Clearance),
            (None, None) => Ok(Pass::None),
        };
        checked.map_err(|f| Box::new(challenge_failed(Step::Edge, f, solution.is_some())))
    }

    /// A `challenge` answer gets its proof of work; a request whose solution was consumed gets
    /// its clearance.
    fn finish_challenge(&self, req: &DecideRequest, v: &mut Verdict, solved: bool, now_ms: i64) {
        use crate::challenge::subject;
        if v.code != Code::RuleChallenge && !solved {
            return;
        }
        let c = &self.challenge;
        let who = subject(
            c.binding,
            req.client.device_id.as_deref(),
            req.client.ip.as_deref(),
        );
        if solved {
            v.clearance = Some(c.clearance(&req.app, who, now_ms));
        }
        if v.code == Code::RuleChallenge {
            let d = v.challenge_difficulty.unwrap_or(c.difficulty);
            v.challenge = Some(c.issue(&req.app, who, d, now_ms));
        }
    }

    /// Declares that the nonce store knows nothing of what was accepted before `from_ms` (Unix
    /// ms): after an unclean stop, the engine lost its in-process records at about that time.
    /// Until every such timestamp fails the window check, a request whose acceptance span began
    /// before `from_ms` (`x-timestamp − window < from_ms`) might be a replay of a request
    /// accepted before the stop, so it is refused with `STORE_UNAVAILABLE` (503, `rule: "nonce"`,
    /// `retry_after_ms` until a fresh timestamp passes) instead of being judged new. The
    /// quarantine ends by itself 2 × window after `from_ms`.
    pub fn set_restart_quarantine(&self, from_ms: i64) {
        self.judge_from_ms
            .store(from_ms, std::sync::atomic::Ordering::Release);
    }

    /// The start of the knowledge of the nonce store (see [`Engine::set_restart_quarantine`]).
    pub fn restart_quarantine(&self) -> Option<i64> {
        let v = self
            .judge_from_ms
            .load(std::sync::atomic::Ordering::Acquire);
        (v != i64::MIN).then_some(v)
    }

    /// Starts (or, with `None`, ends) a candidate's rollout. The swap is atomic: a decision sees
    /// the old or the new candidate, never a mix.
    pub fn set_candidate(&self, c: Option<Arc<Candidate>>) {
        self.candidate.store(c);
    }

    pub fn candidate(&self) -> Option<Arc<Candidate>> {
        self.candidate.load_full()
    }

    /// Replaces the block and allow lists.
    pub fn set_lists(&self, lists: DynamicLists) {
        self.lists.store(Arc::new(lists));
    }

    pub fn lists(&self) -> Arc<DynamicLists> {
        self.lists.load_full()
    }

    /// Adds in-process stores that answer for the shared ones while those fail (only where the
    /// store's policy is `Allow`: a failed shared store never silently denies).
    pub fn with_fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = Some(fallback);
        self
    }

    pub fn app(&self, id: &str) -> Option<&AppPolicy> {
        self.apps.get(id)
    }

    /// Every app, in no particular order.
    pub fn apps(&self) -> impl Iterator<Item = &AppPolicy> {
        self.apps.values()
    }

    /// Replaces an app's keyring (keys added or retired at run time); the use counters of keys
    /// that stay carry over. A decision in flight finishes with the keyring it started with.
    pub fn set_keyring(&self, app: &str, mut keys: Keyring) -> Result<(), RequestError> {
        let a = self
            .apps
            .get(app)
            .ok_or_else(|| RequestError::UnknownApp(app.to_string()))?;
        keys.adopt_usage(&a.keys.load());
        a.keys.store(Arc::new(keys));
        Ok(())
    }

    /// An app's current keyring.
    pub fn keyring(&self, app: &str) -> Option<Arc<Keyring>> {
        self.apps.get(app).map(|a| a.keys.load_full())
    }

    pub fn nonce_store(&self) -> &Arc<dyn NonceStore> {
        &self.nonces
    }

    pub fn fingerprint_store(&self) -> &Arc<dyn FingerprintStore> {
        &self.fingerprints
    }

    pub fn rules(&self) -> &Arc<LiveRules> {
        &self.rules
    }

    /// Housekeeping of every store.
    pub fn maintain(&self, now_ms: i64) {
        self.nonces.maintain(now_ms);
        self.fingerprints.maintain(now_ms);
        if let Some(fb) = &self.fallback {
            fb.nonces.maintain(now_ms);
            fb.fingerprints.maintain(now_ms);
        }
    }

    /// The first `[[routes]]` entry matching (app, path), if any.
    fn route(&self, app: &str, path: &str) -> Option<&RoutePolicy> {
        self.routes.iter().find(|r| r.matches(app, path))
    }

    fn store_failure(
        &self,
        policy: FailPolicy,
        step: Step,
        rule: &str,
        err: &StoreError,
    ) -> Option<Verdict> {
        match policy {
            FailPolicy::Deny => Some(Verdict::reject(
                step,
                Action::Deny,
                Code::StoreUnavailable,
                rule,
                Reason::new(format!("{err}; on_store_error = deny")),
            )),
            FailPolicy::Allow => None,
        }
    }

    fn run_tier(
        &self,
        set: &RuleSet,
        tier: Tier,
        req: Option<&Req>,
        session: &mut RuleSession,
    ) -> Option<Verdict> {
        let mut v = set.evaluate_tier(tier, req?, session)?;
        if v.code == Code::RuleChallenge {
            v.status = self.challenge_status;
        }
        Some(v)
    }

    /// Whether the nonce store spends the gateway tier's planned rate limits in its own round
    /// trip (a shared store that can, and no local fallback to keep in step).
    fn batch_limits(&self) -> bool {
        self.fallback.is_none() && self.nonces.batches_limits()
    }

    /// Judges one request at server time `now_ms`.
    pub fn decide(&self, req: &DecideRequest, now_ms: i64) -> Result<Verdict, RequestError> {
        let (req, bad_path) = normalized(req);
        self.decide_in(&req, None, now_ms, &mut RuleSession::default(), bad_path)
    }

    /// [`Engine::decide`], taking the request and giving it back (its path normalised): the rules
    /// read it in place instead of a copy.
    pub fn decide_owned(
        &self,
        mut req: DecideRequest,
        now_ms: i64,
    ) -> (Result<Verdict, RequestError>, DecideRequest) {
        let bad_path = req.request.normalize().err();
        let rule_req = Req::from_owned(req, now_ms);
        let v = self.decide_in(
            rule_req.request(),
            Some(&rule_req),
            now_ms,
            &mut RuleSession::default(),
            bad_path,
        );
        (v, rule_req.into_request())
    }

    /// [`Engine::decide`], with a trace of every step and rule and its time. It has the same
    /// effects as `decide` (the nonce is recorded, counters move): trace sandboxes, not live
    /// traffic.
    pub fn decide_traced(
        &self,
        req: &DecideRequest,
        now_ms: i64,
    ) -> Result<(Verdict, crate::trace::Trace), RequestError> {
        let mut session = RuleSession::traced();
        let (req, bad_path) = normalized(req);
        let v = self.decide_in(&req, None, now_ms, &mut session, bad_path)?;
        let tracer = session.trace.take().expect("a traced session");
        let trace = tracer.finish(&v);
        Ok((v, trace))
    }

    /// `built`: the rules' view of `req`, when the caller has it already. `req` is normalised
    /// ([`crate::model::JudgedRequest::normalize`]), or `bad_path` says why it cannot be.
    /// Authenticates a call an app makes to the engine itself (an outcome report): `req`
    /// describes that HTTP call (method, path, query, the anti-replay headers) and `body` its
    /// body. Runs the anti-replay steps of a decision — signature, time window, nonce — and
    /// nothing after: a report signed like a request, used once. `Ok` names the key that matched;
    /// `Err` is the refusing step's verdict.
    pub fn authenticate_call(
        &self,
        req: &DecideRequest,
        body: &[u8],
        now_ms: i64,
    ) -> Result<Result<Arc<str>, Verdict>, RequestError> {
        let app = self
            .apps
            .get(&req.app)
            .ok_or_else(|| RequestError::UnknownApp(req.app.clone()))?;
        if let Some(name) = req.request.duplicate_anti_replay_header() {
            return Err(RequestError::DuplicateHeader(name));
        }
        let ctx = DecisionContext {
            request: req,
            app,
            now_ms,
        };
        let body_hash = body_sha256_hex(body);
        let (ts_raw, nonce, key) = match self.check_signature(&ctx, &body_hash) {
            Continue(signed) => signed,
            Break(v) => return Ok(Err(v)),
        };
        let (ts, skew) = match self.check_window(&ctx, ts_raw) {
            Continue(t) => t,
            Break(v) => return Ok(Err(v)),
        };
        match self.check_nonce(&ctx, nonce, ts, skew, None, &[]) {
            Continue(_) => Ok(Ok(key)),
            Break(v) => Ok(Err(v)),
        }
    }

    fn decide_in(
        &self,
        req: &DecideRequest,
        built: Option<&Req>,
        now_ms: i64,
        session: &mut RuleSession,
        bad_path: Option<PathError>,
    ) -> Result<Verdict, RequestError> {
        if req.app.is_empty() {
            return Err(RequestError::InvalidField("app must not be empty".into()));
        }
        let app = self
            .apps
            .get(&req.app)
            .ok_or_else(|| RequestError::UnknownApp(req.app.clone()))?;
        let r = &req.request;

        // Validate the parts of the call that are the caller's responsibility.
        if let Some(name) = r.duplicate_anti_replay_header() {
            return Err(RequestError::DuplicateHeader(name));
        }
        let body_hash: std::borrow::Cow<'_, str> = match (&r.body, &r.body_sha256) {
            (Some(body), given) => {
                // An empty body (every GET a client forwards as `""`) hashes to a constant.
                let h: std::borrow::Cow<'_, str> = if body.is_empty() {
                    EMPTY_BODY_SHA256.into()
                } else {
                    body_sha256_hex(body.as_bytes()).into()
                };
                if let Some(g) = given {
                    if !g.eq_ignore_ascii_case(&h) {
                        return Err(RequestError::InvalidField(
                            "request.body and request.body_sha256 disagree".into(),
                        ));
                    }
                }
                h
            }
            (None, Some(g)) => {
                if !is_sha256_hex(g) {
                    return Err(RequestError::InvalidField(
                        "request.body_sha256 must be 64 hex characters".into(),
                    ));
                }
                g.to_ascii_lowercase().into()
            }
            (None, None) => EMPTY_BODY_SHA256.into(),
        };
        if let Some(ip) = &req.client.ip {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(RequestError::InvalidField(format!(
                    "client.ip {ip:?} is not an IP address"
                )));
            }
        }

        let ctx = DecisionContext {
            request: req,
            app,
            now_ms,
        };
        // The block and allow lists: read-only, before anything else.
        session.step("lists");
        let lists = self.lists.load();
        let listed = lists.check(req);
        if let Some(hit) = listed.as_ref().filter(|h| h.action == ListAction::Block) {
            let mut v = Verdict::reject(
                Step::Edge,
                Action::Deny,
                Code::RuleDeny,
                "blocklist",
                Reason::new(format!(
                    "{} {:?} is on the block list",
                    hit.kind.as_str(),
                    hit.value
                )),
            );
            v.ruleset_version = self.rules.snapshot().version().to_string();
            return Ok(v);
        }
        // A proof of work or clearance, checked without any store (its single use is recorded
        // after the nonce step): the edge rules already see `req.cleared`.
        let pass = match self.challenge_pass(req, now_ms) {
            Ok(p) => p,
            Err(mut v) => {
                v.ruleset_version = self.rules.snapshot().version().to_string();
                return Ok(*v);
            }
        };
        let cleared = !matches!(pass, Pass::None);
        // One snapshot from the first tier to the last, even if a swap happens meanwhile.
        // A guard, not a clone: no shared reference count to bump on every decision.
        let candidate = self.candidate.load();
        // An allow-listed requester skips the rule tiers, never the anti-replay core.
        let allowed = listed.is_some();
        let arm = match (&*candidate, allowed) {
            (Some(c), false) => c.arm(req),
            _ => Arm::Stable,
        };
        let set = match (&*candidate, arm) {
            (Some(c), Arm::Canary) => c.set.clone(),
            _ => self.rules.snapshot(),
        };
        let needs_req = !allowed && (set.rule_count() > 0 || candidate.is_some());
        let rule_req = needs_req.then(|| match built {
            Some(r) => r.clone(),
            None => Req::from_context(&ctx),
        });
        if let (true, Some(r)) = (cleared, &rule_req) {
            r.set_cleared(true);
        }
        let solution = match &pass {
            Pass::Solution(s) => Some(s),
            _ => None,
        };
        let carried = Carried {
            body_hash: &body_hash,
            solution,
        };
        let mut v = self.decide_steps(&ctx, &set, rule_req.as_ref(), session, carried, bad_path);
        // A solution refused after all (used before) clears nothing.
        v.cleared = cleared && v.code != Code::ChallengeFailed;
        // Consumed once the request got past the nonce step (and the store took the record).
        let consumed = solution.is_some()
            && matches!(
                v.step,
                Step::Fingerprint | Step::Gateway | Step::Business | Step::Final
            )
            && !(v.step == Step::Fingerprint && v.code == Code::StoreUnavailable);
        self.finish_challenge(req, &mut v, consumed, now_ms);
        if let (true, Some(s)) = (consumed, solution) {
            v.solve_ms = Some(now_ms - (s.expires_ms - self.challenge.ttl_ms));
        }
        v.shadow = std::mem::take(&mut session.shadow);
        v.score = session.score;
        v.ruleset_version = set.version().to_string();
        v.arm = arm;
        if allowed && v.code == Code::Ok {
            // Says why no rule ran (and keeps backtests from replaying it through rules).
            v.rule = Some("allowlist".into());
        }
        if let (Some(c), Some(rreq)) = (&*candidate, &rule_req) {
            if v.step.reached_rules() {
                let refused = v.action != Action::Allow && v.step.is_rule_tier();
                let counts = match arm {
                    Arm::Canary => &c.stats.canary,
                    Arm::Stable => &c.stats.stable,
                };
                counts.record(refused, session.errors > 0);
                if c.is_shadow() {
                    let (hit, errors) = c.set.simulate(rreq);
                    c.stats.shadow.record(hit.is_some(), errors > 0);
                    v.shadow.extend(hit);
                }
            }
        }
        if let Some(state) = set.state() {
            // Best effort: reputation is advisory, a full store must not change this decision.
            let _ = state.learn(req, &v, now_ms);
        }
        Ok(v)
    }

    /// The steps after request validation; `shadow` hits are collected in `session`. The
    /// anti-replay steps are in [`steps`].
    fn decide_steps(
        &self,
        ctx: &DecisionContext<'_>,
        set: &RuleSet,
        rule_req: Option<&Req>,
        session: &mut RuleSession,
        carried: Carried<'_>,
        bad_path: Option<PathError>,
    ) -> Verdict {
        // 1. Edge rules (read-only).
        session.step("edge");
        if let Some(mut v) = self.run_tier(set, Tier::Edge, rule_req, session) {
            v.degraded |= session.degraded;
            return v;
        }
        // A method, path or query that has no normal form (a line break, an encoded separator, a
        // `..` above the root) is refused here: after the edge rules (the WAF names the attack
        // when it sees one), before anything is signed over or written.
        if let Some(e) = bad_path {
            return Verdict::reject(
                Step::Edge,
                Action::Deny,
                Code::RuleDeny,
                "path",
                Reason::new(e.to_string()),
            );
        }
        // A browser behind forward-auth has no key to sign with: an app that accepts unsigned
        // requests judges one that carries none of the anti-replay headers by its rules alone.
        if ctx.app.accept_unsigned {
            let [t, n, s] =
                ctx.request
                    .request
                    .headers_of(["x-timestamp", "x-nonce", "x-signature"]);
            if t.is_none() && n.is_none() && s.is_none() {
                return self.decide_unsigned(ctx, set, rule_req, session, carried);
            }
        }
        // 2. Signature.
        session.step("signature");
        let (ts_raw, nonce, key_id) = match self.check_signature(ctx, carried.body_hash) {
            Continue(signed) => signed,
            Break(v) => return v,
        };
        let mut v = self.decide_signed(ctx, set, rule_req, session, carried, (ts_raw, nonce));
        v.key_id = Some(key_id);
        v
    }

    /// The steps after the signature, given its raw `x-timestamp` and nonce (their verdicts all
    /// name the key that matched).
    fn decide_signed(
        &self,
        ctx: &DecisionContext<'_>,
        set: &RuleSet,
        rule_req: Option<&Req>,
        session: &mut RuleSession,
        carried: Carried<'_>,
        (ts_raw, nonce): (&str, &str),
    ) -> Verdict {
        // 3. Time window.
        session.step("window");
        let (ts, skew) = match self.check_window(ctx, ts_raw) {
            Continue(t) => t,
            Break(v) => return v,
        };
        // 4. Nonce de-duplication: the first write to shared state. The fingerprint of step 5
        // goes with it where the store can take both at once (not with a solution to record in
        // between: its single use must be recorded before the fingerprint).
        session.step("nonce");
        let then = self.fingerprint_of(ctx, carried.body_hash);
        let together = then.filter(|_| carried.solution.is_none());
        // The gateway and business tiers' rate limits and distinct counts go with them where the
        // store can take them (and no solution is recorded in between): planned here, made in
        // the same round trip only if the request is fresh and new, handed to the rules below.
        let limits = match rule_req {
            Some(r) if carried.solution.is_none() && self.batch_limits() => set.plan_calls(r),
            _ => Vec::new(),
        };
        let (degraded, answered, spent) =
            match self.check_nonce(ctx, nonce, ts, skew, together, &limits) {
                Continue(d) => d,
                Break(v) => return v,
            };
        let _prefetched = crate::rules::prefetched(limits.into_iter().zip(spent));
        // A proof of work is used once: recorded now that the request is known fresh.
        if let Some(s) = carried.solution {
            session.step("challenge");
            if let Break(v) = self.consume_solution(ctx, s) {
                return v;
            }
        }
        // 5. Duplicate-submission fingerprint.
        session.step("fingerprint");
        let degraded = match self.check_fingerprint(ctx, then, answered, degraded) {
            Continue(degraded) => degraded,
            Break(v) => return v,
        };
        self.decide_rules(set, rule_req, session, degraded)
    }

    /// An unsigned request of an app that accepts them: no signature, window, nonce or
    /// duplicate-submission step (nothing identifies one sending of it); a verified solution is
    /// still used once, then the gateway and business rules judge it. Its verdict names no key.
    fn decide_unsigned(
        &self,
        ctx: &DecisionContext<'_>,
        set: &RuleSet,
        rule_req: Option<&Req>,
        session: &mut RuleSession,
        carried: Carried<'_>,
    ) -> Verdict {
        if let Some(s) = carried.solution {
            session.step("challenge");
            if let Break(v) = self.consume_solution(ctx, s) {
                return v;
            }
        }
        self.decide_rules(set, rule_req, session, false)
    }

    /// Steps 6–8: the gateway and business rules, then the scores against the thresholds.
    fn decide_rules(
        &self,
        set: &RuleSet,
        rule_req: Option<&Req>,
        session: &mut RuleSession,
        degraded: bool,
    ) -> Verdict {
        // 6–7. Gateway and business rules.
        for tier in [Tier::Gateway, Tier::Business] {
            session.step(tier.as_str());
            if let Some(mut v) = self.run_tier(set, tier, rule_req, session) {
                v.degraded |= degraded || session.degraded;
                return v;
            }
        }
        // 8. Scores of every tier against the thresholds.
        session.step("score");
        let mut v = set.finish(session).unwrap_or_else(Verdict::allow);
        if v.code == Code::RuleChallenge {
            v.status = self.challenge_status;
        }
        v.degraded = degraded || session.degraded;
        v
    }
}

/// `CHALLENGE_FAILED` for `failure` (of a solution, or of a clearance).
fn challenge_failed(step: Step, failure: crate::challenge::Failure, solution: bool) -> Verdict {
    let what = if solution { "solution" } else { "clearance" };
    Verdict::reject(
        step,
        Action::Deny,
        Code::ChallengeFailed,
        "challenge",
        Reason::new(format!(
            "{}: the {what} is {}",
            failure.as_str(),
            match failure {
                crate::challenge::Failure::Malformed => "not well formed",
                crate::challenge::Failure::Forged =>
                    "not one this engine issued (or its key was retired)",
                crate::challenge::Failure::Expired => "expired",
                crate::challenge::Failure::ForeignApp => "for another app",
                crate::challenge::Failure::ForeignSubject => "for another device or address",
                crate::challenge::Failure::Unsolved => "not a solution: too few zero bits",
                crate::challenge::Failure::Reused => "already used",
            }
        )),
    )
}

/// `req` with its path normalised: borrowed when it is already in normal form (the common case),
/// else a normalised copy; or `req` as it is and why its method, path or query is refused.
fn normalized(req: &DecideRequest) -> (std::borrow::Cow<'_, DecideRequest>, Option<PathError>) {
    if req.request.is_normalized() {
        return (std::borrow::Cow::Borrowed(req), None);
    }
    let mut owned = req.clone();
    match owned.request.normalize() {
        Ok(()) => (std::borrow::Cow::Owned(owned), None),
        Err(e) => (std::borrow::Cow::Borrowed(req), Some(e)),
    }
}
