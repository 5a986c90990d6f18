//! The decision path of DESIGN §1, without I/O: the caller passes the server time and the stores.
//!
//! ```text
//! edge rules → signature → time window → nonce dedup → fingerprint → gateway rules → business rules
//! ```
//!
//! Every step before the nonce store is pure computation, so a forged request costs Rampart no
//! storage: a request with a bad signature or a stale timestamp never reaches the nonce store and so
//! never consumes its nonce.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::Arm;
use crate::model::{Action, Code, DecideRequest, Reason, Step, Verdict};
use crate::policy::{AppPolicy, DedupPolicy, FailPolicy, RoutePolicy, StorePolicies, Tier};
use crate::replay::canonical::{body_sha256_hex, canonical_query, SignedFields, EMPTY_BODY_SHA256};
use crate::replay::fingerprint::{canonical_json, fingerprint, FingerprintStore, Submission};
use crate::replay::nonce::{validate_nonce, NonceStore, NonceVerdict};
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
}

impl RequestError {
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::UnknownApp(_) => "UNKNOWN_APP",
            RequestError::InvalidField(_) => "INVALID_FIELD",
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            RequestError::UnknownApp(_) => 404,
            RequestError::InvalidField(_) => 400,
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
        }
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

    pub fn nonce_store(&self) -> &Arc<dyn NonceStore> {
        &self.nonces
    }

    pub fn fingerprint_store(&self) -> &Arc<dyn FingerprintStore> {
        &self.fingerprints
    }

    pub fn rules(&self) -> &Arc<LiveRules> {
        &self.rules
    }

    /// Best-effort cache warm-up for the nonce step (no state is read or written).
    fn prefetch_nonce(&self, app: &AppPolicy, ts_raw: &str, nonce: &str) {
        if let Some(ts) = parse_timestamp(ts_raw) {
            self.nonces.prefetch(&app.id, nonce, ts);
        }
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

    /// Judges one request at server time `now_ms`.
    pub fn decide(&self, req: &DecideRequest, now_ms: i64) -> Result<Verdict, RequestError> {
        self.decide_in(req, None, now_ms, &mut RuleSession::default())
    }

    /// [`Engine::decide`], taking the request and giving it back: the rules read it in place
    /// instead of a copy.
    pub fn decide_owned(
        &self,
        req: DecideRequest,
        now_ms: i64,
    ) -> (Result<Verdict, RequestError>, DecideRequest) {
        let rule_req = Req::from_owned(req, now_ms);
        let v = self.decide_in(
            rule_req.request(),
            Some(&rule_req),
            now_ms,
            &mut RuleSession::default(),
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
        let v = self.decide_in(req, None, now_ms, &mut session)?;
        let tracer = session.trace.take().expect("a traced session");
        let trace = tracer.finish(&v);
        Ok((v, trace))
    }

    /// `built`: the rules' view of `req`, when the caller has it already.
    fn decide_in(
        &self,
        req: &DecideRequest,
        built: Option<&Req>,
        now_ms: i64,
        session: &mut RuleSession,
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
        let body_hash: std::borrow::Cow<'_, str> = match (&r.body, &r.body_sha256) {
            (Some(body), given) => {
                let h = body_sha256_hex(body.as_bytes());
                if let Some(g) = given {
                    if !g.eq_ignore_ascii_case(&h) {
                        return Err(RequestError::InvalidField(
                            "request.body and request.body_sha256 disagree".into(),
                        ));
                    }
                }
                h.into()
            }
            (None, Some(g)) => {
                if g.len() != 64 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
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
        let mut v = self.decide_steps(&ctx, &set, rule_req.as_ref(), session, &body_hash);
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

    /// The steps after request validation; `shadow` hits are collected in `session`.
    fn decide_steps(
        &self,
        ctx: &DecisionContext<'_>,
        set: &RuleSet,
        rule_req: Option<&Req>,
        session: &mut RuleSession,
        body_hash: &str,
    ) -> Verdict {
        let (req, app, now_ms) = (ctx.request, ctx.app, ctx.now_ms);
        let r = &req.request;

        // 1. Edge rules (read-only).
        session.step("edge");
        if let Some(mut v) = self.run_tier(set, Tier::Edge, rule_req, session) {
            v.degraded |= session.degraded;
            return v;
        }

        // 2. Signature.
        session.step("signature");
        let (ts_raw, nonce, sig) = match (
            r.header("x-timestamp"),
            r.header("x-nonce"),
            r.header("x-signature"),
        ) {
            (Some(t), Some(n), Some(s)) => (t, n, s),
            (t, n, s) => {
                let missing: Vec<&str> = [("x-timestamp", t), ("x-nonce", n), ("x-signature", s)]
                    .into_iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(k, _)| k)
                    .collect();
                return Verdict::reject(
                    Step::Signature,
                    Action::Deny,
                    Code::SignatureMissing,
                    "signature",
                    Reason::new(format!(
                        "missing anti-replay header(s): {}",
                        missing.join(", ")
                    )),
                );
            }
        };
        // Warm the nonce filter's cache line now: the HMAC below takes long enough to hide the miss.
        self.prefetch_nonce(app, ts_raw, nonce);
        let fields = SignedFields {
            app: &app.id,
            method: &r.method,
            path: &r.path,
            query: &r.query,
            timestamp: ts_raw,
            nonce,
            body_sha256: body_hash,
        };
        if let Err(e) = app.signer.verify(&fields, sig) {
            return Verdict::reject(
                Step::Signature,
                Action::Deny,
                Code::SignatureInvalid,
                "signature",
                Reason::new(e.to_string()),
            );
        }

        // 3. Time window.
        session.step("window");
        let ts = match parse_timestamp(ts_raw) {
            Some(ts) => ts,
            None => {
                let mut v = Verdict::reject(
                    Step::Window,
                    Action::Deny,
                    Code::TimestampSkew,
                    "window",
                    Reason {
                        message: "x-timestamp is not a Unix time in milliseconds".into(),
                        server_time_ms: Some(now_ms),
                        skew_ms: None,
                    },
                );
                v.server_time_ms = Some(now_ms);
                return v;
            }
        };
        // Routes (the path is signed, so an attacker cannot pick one) may narrow the app's window.
        // Every matching route counts, not only the first: a broad entry listed before a
        // sensitive one (for its dedup settings) must not hide the sensitive route's window.
        let window_ms = self
            .routes
            .iter()
            .filter(|rt| rt.window_ms.is_some() && rt.matches(&app.id, &r.path))
            .filter_map(|rt| rt.window_ms)
            .fold(app.window_ms, i64::min);
        let route = self.route(&app.id, &r.path);
        let skew = ts.saturating_sub(now_ms);
        if skew.unsigned_abs() > window_ms.unsigned_abs() {
            return skew_verdict(now_ms, skew, window_ms);
        }

        // 4. Nonce de-duplication: the first write to shared state.
        session.step("nonce");
        if let Err(msg) = validate_nonce(nonce) {
            return Verdict::reject(
                Step::Nonce,
                Action::Deny,
                Code::NonceInvalid,
                "nonce",
                Reason::new(msg),
            );
        }
        let mut degraded = false;
        let mut seen = self
            .nonces
            .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms);
        if let Some(fb) = &self.fallback {
            match &seen {
                // Write-through, so the local filter knows this instance's nonces when it is
                // needed. And it is asked: a nonce this instance accepted while the shared store
                // was away (or before the shared store restarted empty) is still a replay.
                Ok(NonceVerdict::Fresh) => {
                    if let Ok(NonceVerdict::Replay) =
                        fb.nonces
                            .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms)
                    {
                        seen = Ok(NonceVerdict::Replay);
                    }
                }
                Err(e)
                    if e.is_store_failure() && self.on_store_error.nonce == FailPolicy::Allow =>
                {
                    degraded = true;
                    seen = fb
                        .nonces
                        .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms);
                }
                _ => {}
            }
        }
        match seen {
            Ok(NonceVerdict::Fresh) => {}
            Ok(NonceVerdict::Replay) => {
                let mut v = Verdict::reject(
                    Step::Nonce,
                    Action::Deny,
                    Code::ReplayDuplicate,
                    "nonce",
                    Reason::new("this (app, x-nonce) was already used: replayed request"),
                );
                v.degraded = degraded;
                return v;
            }
            Ok(NonceVerdict::OutOfRange) => {
                return skew_verdict(now_ms, skew, app.window_ms);
            }
            Err(e) => match self.store_failure(self.on_store_error.nonce, Step::Nonce, "nonce", &e)
            {
                Some(v) => return v,
                None => degraded = true,
            },
        }

        // 5. Duplicate-submission fingerprint.
        session.step("fingerprint");
        let dedup = route.map(|r| &r.dedup).unwrap_or(&self.default_dedup);
        // Users and devices live in separate namespaces: user "x" is not device "x".
        let user = match (req.user_id.as_deref(), req.client.device_id.as_deref()) {
            (Some(u), _) if !u.is_empty() => Some(format!("u:{u}")),
            (_, Some(d)) if !d.is_empty() => Some(format!("d:{d}")),
            _ => None,
        };
        if let Some(user) = user.as_deref() {
            let method = r.method.to_ascii_uppercase();
            if dedup.window_ms > 0 && dedup.methods.contains(&method) {
                let params = submission_params(req, body_hash, &dedup.volatile_fields);
                let query = canonical_query(&r.query);
                let fp = fingerprint(&Submission {
                    app: &app.id,
                    user,
                    method: &method,
                    path: &r.path,
                    canonical_query: &query,
                    canonical_params: &params,
                });
                let mut first = self
                    .fingerprints
                    .insert_if_absent(fp, dedup.window_ms, now_ms);
                if let Some(fb) = &self.fallback {
                    match &first {
                        Ok(true) => {
                            if let Ok(false) =
                                fb.fingerprints
                                    .insert_if_absent(fp, dedup.window_ms, now_ms)
                            {
                                first = Ok(false);
                            }
                        }
                        Err(e)
                            if e.is_store_failure()
                                && self.on_store_error.fingerprint == FailPolicy::Allow =>
                        {
                            degraded = true;
                            first = fb
                                .fingerprints
                                .insert_if_absent(fp, dedup.window_ms, now_ms);
                        }
                        _ => {}
                    }
                }
                match first {
                    Ok(true) => {}
                    Ok(false) => {
                        let mut v = Verdict::reject(
                            Step::Fingerprint,
                            Action::Deny,
                            Code::DuplicateSubmission,
                            "fingerprint",
                            Reason::new(format!(
                                "same user, route and params within {} ms",
                                dedup.window_ms
                            )),
                        );
                        v.degraded = degraded;
                        return v;
                    }
                    Err(e) => match self.store_failure(
                        self.on_store_error.fingerprint,
                        Step::Fingerprint,
                        "fingerprint",
                        &e,
                    ) {
                        Some(v) => return v,
                        None => degraded = true,
                    },
                }
            }
        }

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

/// Strict Unix-ms parse: ASCII digits only (no sign, no spaces), at most 16 digits.
fn parse_timestamp(raw: &str) -> Option<i64> {
    if raw.is_empty() || raw.len() > 16 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

fn skew_verdict(now_ms: i64, skew: i64, window_ms: i64) -> Verdict {
    let mut v = Verdict::reject(
        Step::Window,
        Action::Deny,
        Code::TimestampSkew,
        "window",
        Reason {
            message: format!(
                "x-timestamp is {} ms {} server time; the window is ±{window_ms} ms",
                skew.unsigned_abs(),
                if skew > 0 { "ahead of" } else { "behind" }
            ),
            server_time_ms: Some(now_ms),
            skew_ms: Some(skew),
        },
    );
    v.server_time_ms = Some(now_ms);
    v.skew_ms = Some(skew);
    v
}

/// The params of a submission: `params` when given, else the body when it is JSON, else the body
/// hash.
fn submission_params(req: &DecideRequest, body_hash: &str, volatile: &[String]) -> String {
    if let Some(p) = &req.params {
        return canonical_json(p, volatile);
    }
    if let Some(body) = &req.request.body {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
            return canonical_json(&v, volatile);
        }
    }
    format!("sha256:{body_hash}")
}
