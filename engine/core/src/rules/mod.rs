//! The three-tier Rhai rule runtime (DESIGN §4).
//!
//! A rule is a Rhai script with a metadata header of `//! key: value` lines:
//!
//! ```text
//! //! name: scanner-user-agents
//! //! priority: 10
//! //! mode: enforce            (or shadow)
//! //! owner: secops
//! //! description: Known security scanners announce themselves in the user agent.
//! //! apps: shop, pay          (optional; default every app)
//! //! routes: /api/order/*     (optional; exact paths, or prefixes ending in *)
//! if contains_any("scanner_ua", req.user_agent) { deny("scanner user agent") }
//! ```
//!
//! The tier comes from the directory (`edge/`, `gateway/`, `business/`); lists come from
//! `lists/<name>.txt`. A [`RuleSet`] is compiled and validated as a whole — every script compiled
//! once, every failure reported with file, line and column — and published as one immutable
//! snapshot in [`LiveRules`] (`arc-swap`): a failed compile never replaces the live set.
//!
//! **Evaluation.** Per tier, the rules that apply to the request's app (indexed at compile time)
//! and route run in priority order against a typed request object `req` (getters over
//! `ImmutableString`s, not a map rebuilt per request). The first terminal action (`deny`,
//! `challenge`, `review`) wins; `allow()` ends the tier; `score(points, reason)` adds points that are
//! compared with the thresholds after the business tier. A rule in `shadow` mode runs but only
//! reports what it would have done. A rule that errors or hits a bound is counted and answered by
//! its tier's declared default (`Allow` = go on, `Deny` = deny with `RULE_DENY`).
//!
//! **Store failures** inside a helper (Redis unreachable, a local store full) are not rule errors:
//! they are answered by that store's declared policy ([`StorePolicies`]). `Deny` stops the decision
//! with `STORE_UNAVAILABLE` (from an enforced rule); `Allow` makes the helper answer its neutral
//! value (`rate_limit` → allowed, `count`/`distinct`/`reputation`/`claimed` → 0, `report` → nothing)
//! and marks the decision `degraded`. A bad argument from the rule itself stays a rule error.
//!
//! **Bounds** (each one stops a class of runaway script; none is reached by a sane rule):
//! - operations ≤ 20,000 — an infinite loop is cut off after ~100 µs instead of stalling a worker;
//! - call depth ≤ 8 and expression depth ≤ 32 (16 in functions) — no runaway recursion;
//! - strings ≤ 1 MiB, arrays and maps ≤ 1,024 entries — no unbounded growth (`s += s`);
//! - strict variables — a typo in a variable name is a compile error, not a runtime surprise.

pub mod lists;
mod precheck;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use rhai::{Dynamic, EvalAltResult, ImmutableString, Position, Scope, AST};
use sha2::{Digest, Sha256};

use crate::engine::{DecisionContext, FailPolicy, StorePolicies, Tier};
use crate::hll::{DistinctStore, LocalDistinct};
use crate::limits::{LimiterStore, LocalLimiter};
use crate::model::{Action, Code, DecideRequest, Reason, ShadowHit, Step, Verdict};
use crate::nonce::StoreError;
use crate::quota::{LocalQuotas, QuotaStore};
use lists::{list_entries, IpList, StringList};

pub const TIERS: [Tier; 3] = [Tier::Edge, Tier::Gateway, Tier::Business];

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Edge => "edge",
            Tier::Gateway => "gateway",
            Tier::Business => "business",
        }
    }

    fn index(self) -> usize {
        match self {
            Tier::Edge => 0,
            Tier::Gateway => 1,
            Tier::Business => 2,
        }
    }

    fn from_dir(s: &str) -> Option<Tier> {
        TIERS.into_iter().find(|t| t.as_str() == s)
    }
}

/// One source file of a rule set: `edge/x.rhai`, `lists/y.txt`, … (paths relative to the rule
/// directory, with `/` separators).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: String,
    pub text: String,
}

/// A located validation failure.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Enforce,
    Shadow,
}

/// A rule's metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuleMeta {
    pub name: String,
    pub tier: &'static str,
    pub priority: i64,
    pub mode: Mode,
    pub owner: String,
    pub description: String,
    pub apps: Option<Vec<String>>,
    pub routes: Vec<String>,
    pub file: String,
}

struct Rule {
    meta: RuleMeta,
    /// The script answers with an outcome on every run (an outcome call outside any block).
    always_terminal: bool,
    ast: AST,
    /// Answers "no match" natively for most requests (see `precheck`).
    precheck: Option<precheck::Precheck>,
    errors: AtomicU64,
    hits: AtomicU64,
}

impl Rule {
    fn applies_to_route(&self, path: &str) -> bool {
        self.meta.routes.is_empty()
            || self.meta.routes.iter().any(|r| match r.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => path == r,
            })
    }
}

/// Engine-wide state the counting helpers use; it outlives rule set swaps.
#[derive(Clone)]
pub struct RuleState {
    pub limiter: Arc<dyn LimiterStore>,
    /// Circuit breakers per route, fed by `POST /v1/outcome`.
    pub breakers: Arc<crate::breaker::LocalBreakers>,
    pub distinct: Arc<dyn DistinctStore>,
    pub quotas: Arc<dyn QuotaStore>,
    pub reputation: ReputationPolicy,
    /// What a helper does when its store fails.
    pub policies: StorePolicies,
}

/// How decisions feed reputation (see [`RuleState::learn`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReputationPolicy {
    /// Reputation is the sum of points over this sliding window.
    pub window_ms: i64,
    /// Points for a deny by the gateway or business tier.
    pub deny_points: i64,
    /// Points for a challenge or review by those tiers.
    pub challenge_points: i64,
}

impl Default for ReputationPolicy {
    fn default() -> Self {
        ReputationPolicy {
            window_ms: 3_600_000,
            deny_points: 10,
            challenge_points: 3,
        }
    }
}

/// What reputation is kept about.
pub const REPUTATION_KINDS: [&str; 4] = ["ip", "device", "ja3", "user"];

/// How long a quota pool lives after its last claim: a campaign's "once per user" must outlast it.
pub const QUOTA_POOL_TTL_MS: i64 = 30 * 24 * 3_600_000;

impl RuleState {
    pub fn local(max_entries: usize) -> Self {
        RuleState {
            limiter: Arc::new(LocalLimiter::new(max_entries)),
            breakers: Arc::new(crate::breaker::LocalBreakers::new()),
            distinct: Arc::new(LocalDistinct::new(max_entries)),
            quotas: Arc::new(LocalQuotas::new(max_entries, QUOTA_POOL_TTL_MS)),
            reputation: ReputationPolicy::default(),
            policies: StorePolicies::default(),
        }
    }

    pub fn maintain(&self, now_ms: i64) {
        self.limiter.maintain(now_ms);
        self.distinct.maintain(now_ms);
        self.quotas.maintain(now_ms);
    }

    fn reputation_key(kind: &str, value: &str) -> String {
        let mut key = String::new();
        Self::write_reputation_key(&mut key, kind, value);
        key
    }

    fn write_reputation_key(key: &mut String, kind: &str, value: &str) {
        key.clear();
        key.reserve(kind.len() + value.len() + 5);
        key.push_str("rep\u{1f}");
        key.push_str(kind);
        key.push('\u{1f}');
        key.push_str(value);
    }

    /// Adds `points` to the reputation of (`kind`, `value`); empty values are ignored.
    pub fn report(
        &self,
        kind: &str,
        value: &str,
        points: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if value.is_empty() || points == 0 {
            return Ok(());
        }
        self.limiter
            .incr(
                &Self::reputation_key(kind, value),
                now_ms,
                self.reputation.window_ms,
                points,
            )
            .map(|_| ())
    }

    /// The reputation points of (`kind`, `value`) over the window; 0 when unknown.
    pub fn reputation(&self, kind: &str, value: &str, now_ms: i64) -> Result<i64, StoreError> {
        if value.is_empty() {
            return Ok(0);
        }
        self.limiter.get(
            &Self::reputation_key(kind, value),
            now_ms,
            self.reputation.window_ms,
        )
    }

    /// The worst reputation among several (`kind`, `value`) pairs, read in one batch (one round
    /// trip on a shared store).
    pub fn worst_reputation(&self, pairs: &[(&str, &str)], now_ms: i64) -> Result<i64, StoreError> {
        // The keys are written into strings kept per thread (one decision reads up to four).
        thread_local! {
            static KEYS: std::cell::Cell<Vec<String>> = const { std::cell::Cell::new(Vec::new()) };
        }
        let mut keys = KEYS.take();
        let mut n = 0;
        for (kind, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
            if n == keys.len() {
                keys.push(String::new());
            }
            Self::write_reputation_key(&mut keys[n], kind, value);
            n += 1;
        }
        let worst = match n {
            0 => Ok(0),
            _ => self
                .limiter
                .get_many(&keys[..n], now_ms, self.reputation.window_ms)
                .map(|points| points.into_iter().max().unwrap_or(0)),
        };
        KEYS.set(keys);
        worst
    }

    /// Feeds a finished decision into reputation: what the gateway and business tiers refuse counts
    /// against the client's IP, device, JA3 and user, so edge rules can read it on the next
    /// request (except `QUOTA_EXHAUSTED` and reviews, which say nothing bad about the client). The anti-replay steps never write here: a forged request must cost Rampart no
    /// storage, and a replay keeps its precise `REPLAY_DUPLICATE` answer however often it comes.
    pub fn learn(
        &self,
        request: &crate::model::DecideRequest,
        v: &Verdict,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let later_tier = matches!(v.step, Step::Gateway | Step::Business);
        // A sold-out pool or a claim already made is not misbehaviour (everyone in a lottery rush
        // gets it), nor is a payment sent to human review: neither counts against the client.
        if v.code == Code::QuotaExhausted || v.action == Action::Review {
            return Ok(());
        }
        let points = match v.action {
            Action::Allow => return Ok(()),
            Action::Deny if later_tier => self.reputation.deny_points,
            Action::Challenge | Action::Review if later_tier => self.reputation.challenge_points,
            _ => return Ok(()),
        };
        let c = &request.client;
        for (kind, value) in REPUTATION_KINDS.iter().zip([
            c.ip.as_deref(),
            c.device_id.as_deref(),
            c.ja3.as_deref(),
            request.user_id.as_deref(),
        ]) {
            let value = value.unwrap_or("");
            if !value.is_empty() {
                // Not awaited: the answer is already decided, learning must not delay it.
                self.limiter.incr_detached(
                    &Self::reputation_key(kind, value),
                    now_ms,
                    self.reputation.window_ms,
                    points,
                );
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for RuleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleState")
            .field("limiter_keys", &self.limiter.len())
            .finish()
    }
}

thread_local! {
    /// Server time of the decision being evaluated on this thread (helpers that count need it).
    static EVAL_NOW: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
    /// The function-resolution caches of function-less rules, by set id (most recent first).
    static RESOLUTION: std::cell::RefCell<[Option<(u64, rhai::Caches)>; 2]> =
        const { std::cell::RefCell::new([None, None]) };
    /// `retry_after_ms` of the last refused `rate_limit` call on this thread.
    static LAST_RETRY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// True while a shadow rule runs: helpers with lasting effects (claims, reports) only look.
    static IN_SHADOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set by a helper whose store failed under a `Deny` policy: names the store.
    static STORE_DOWN: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
    /// Set by a helper whose store failed under an `Allow` policy (it answered its neutral value).
    static DEGRADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// True while a candidate rule set is simulated (shadow stage): every rule runs as in shadow.
    static SIMULATING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Prefix of the counting helpers' keys while simulating, so a simulated candidate never
    /// spends the stable set's rate limits or counters.
    static KEY_NS: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `key` under the simulation prefix, when one is set.
fn ns_key(key: &str) -> std::borrow::Cow<'_, str> {
    KEY_NS.with(|ns| {
        let ns = ns.borrow();
        if ns.is_empty() {
            std::borrow::Cow::Borrowed(key)
        } else {
            std::borrow::Cow::Owned(format!("{ns}{key}"))
        }
    })
}

/// A helper's store answer, with the store's declared policy applied to failures (see the module
/// docs): `Ok` passes through; a store failure under `Allow` becomes `neutral` and marks the
/// decision degraded; under `Deny` it fails the rule and flags `STORE_UNAVAILABLE`.
fn by_policy<T>(
    helper: &str,
    store: &'static str,
    policy: FailPolicy,
    r: Result<T, StoreError>,
    neutral: T,
) -> RhaiResult<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e) if !e.is_store_failure() => Err(rt_err(format!("{helper}: {e}"))),
        Err(e) => match policy {
            FailPolicy::Allow => {
                DEGRADED.with(|d| d.set(true));
                Ok(neutral)
            }
            FailPolicy::Deny => {
                STORE_DOWN.with(|d| d.set(Some(store)));
                Err(rt_err(format!("{helper}: {e}")))
            }
        },
    }
}

/// Settings of a rule set that come from the engine's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSettings {
    /// What a rule error means, per tier (edge, gateway, business).
    pub on_error: [FailPolicy; 3],
    pub challenge_score: i64,
    pub review_score: i64,
    pub deny_score: i64,
}

impl Default for RuleSettings {
    fn default() -> Self {
        RuleSettings {
            on_error: [FailPolicy::Allow, FailPolicy::Allow, FailPolicy::Allow],
            challenge_score: 40,
            review_score: 70,
            deny_score: 100,
        }
    }
}

/// What a rule returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Allow,
    Terminal {
        action: Action,
        code: Code,
        reason: String,
    },
    Score {
        points: i64,
        reason: String,
    },
}

/// The request as rules see it, built once per decision. Rhai clones the object when a rule reads
/// a property or passes `req` to a helper, so it is one shared pointer: a clone is one atomic
/// increment.
#[derive(Debug, Clone, Default)]
pub struct Req(Arc<ReqData>);

impl std::ops::Deref for Req {
    type Target = ReqData;
    fn deref(&self) -> &ReqData {
        &self.0
    }
}

/// What [`Req`] holds: the judged request itself (its strings are read in place, never copied),
/// the few values derived from it, and the decision's time.
#[derive(Debug, Default)]
pub struct ReqData {
    src: DecideRequest,
    /// `request.method` in upper case, when it is not already.
    method_upper: Option<Box<str>>,
    /// Server time of the decision (not a getter: helpers read it).
    pub now_ms: i64,
    /// The WAF scan of this request, done once however many rules ask.
    waf_hit: std::sync::OnceLock<Option<(crate::waf::Attack, &'static str)>>,
}

impl Req {
    pub fn from_context(ctx: &DecisionContext<'_>) -> Req {
        Self::from_request(ctx.request, ctx.now_ms)
    }

    /// The rule-visible view of `r` at server time `now_ms` (a copy of `r`).
    pub fn from_request(r: &DecideRequest, now_ms: i64) -> Req {
        Self::from_owned(r.clone(), now_ms)
    }

    /// The rule-visible view of `r` at server time `now_ms`, taking `r` (see
    /// [`Req::into_request`]).
    pub fn from_owned(r: DecideRequest, now_ms: i64) -> Req {
        let m = &r.request.method;
        let method_upper = m
            .bytes()
            .any(|b| b.is_ascii_lowercase())
            .then(|| m.to_ascii_uppercase().into_boxed_str());
        Req(Arc::new(ReqData {
            src: r,
            method_upper,
            now_ms,
            waf_hit: std::sync::OnceLock::new(),
        }))
    }

    /// The judged request back: taken when this is the last handle (rules keep none once a
    /// decision is made), else copied.
    pub fn into_request(self) -> DecideRequest {
        match Arc::try_unwrap(self.0) {
            Ok(data) => data.src,
            Err(shared) => shared.src.clone(),
        }
    }
}

/// `""` for an absent value.
fn or_empty(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

impl ReqData {
    /// The judged request.
    pub fn request(&self) -> &DecideRequest {
        &self.src
    }

    pub fn app(&self) -> &str {
        &self.src.app
    }

    pub fn path(&self) -> &str {
        &self.src.request.path
    }

    /// `request.method`, upper-cased.
    pub fn method(&self) -> &str {
        self.method_upper
            .as_deref()
            .unwrap_or(&self.src.request.method)
    }

    pub fn user(&self) -> &str {
        or_empty(&self.src.user_id)
    }

    pub fn ip(&self) -> &str {
        or_empty(&self.src.client.ip)
    }

    pub fn device_id(&self) -> &str {
        or_empty(&self.src.client.device_id)
    }

    pub fn ja3(&self) -> &str {
        or_empty(&self.src.client.ja3)
    }

    /// The caller's `client.user_agent`, else the judged request's own header.
    pub fn user_agent(&self) -> &str {
        self.src
            .client
            .user_agent
            .as_deref()
            .or_else(|| self.src.request.header("user-agent"))
            .unwrap_or("")
    }

    /// The first attack the WAF detectors find in the request, and where (cached).
    pub fn waf(&self) -> Option<(crate::waf::Attack, &'static str)> {
        *self.waf_hit.get_or_init(|| {
            let r = &self.src.request;
            crate::waf::scan_request(
                &r.path,
                &r.query,
                r.body.as_deref().unwrap_or(""),
                self.src.params.as_ref(),
                r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )
        })
    }

    /// `waf(req)`: the attack's name, or "".
    fn waf_name(&self) -> &'static str {
        self.waf().map(|(a, _)| a.as_str()).unwrap_or("")
    }

    /// `waf_part(req)`: where the attack is, or "".
    fn waf_part(&self) -> &'static str {
        self.waf().map(|(_, part)| part).unwrap_or("")
    }

    /// `header(name)`, case-insensitive: "" when absent.
    fn header(&self, name: &str) -> &str {
        self.src.request.header(name).unwrap_or("")
    }

    fn param(&self, name: &str) -> Dynamic {
        match self.src.params.as_ref().and_then(|p| p.get(name)) {
            None | Some(serde_json::Value::Null) => Dynamic::UNIT,
            Some(serde_json::Value::String(s)) => s.clone().into(),
            Some(serde_json::Value::Bool(b)) => (*b).into(),
            Some(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => i.into(),
                None => n.as_f64().unwrap_or(0.0).into(),
            },
            Some(other) => other.to_string().into(),
        }
    }
}

fn next_set_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Named lists of a rule set.
#[derive(Debug, Default)]
struct Lists {
    ips: HashMap<String, IpList>,
    strings: HashMap<String, StringList>,
}

impl Lists {
    /// `in_list`: `None` when there is no such string list.
    fn in_list(&self, list: &str, value: &str) -> Option<bool> {
        self.strings.get(list).map(|s| s.contains(value))
    }

    /// `contains_any`: `None` when there is no such string list.
    fn contains_any(&self, list: &str, value: &str) -> Option<bool> {
        self.strings.get(list).map(|s| s.contains_any(value))
    }

    /// `ip_in`: `None` when there is no such IP list.
    fn ip_in(&self, list: &str, ip: &str) -> Option<bool> {
        self.ips.get(list).map(|s| s.contains_str(ip))
    }
}

/// `waf_value(v)`: the attack found in `v` alone, or "".
fn waf_value(v: &str) -> &'static str {
    crate::waf::scan_value(v).map(|a| a.as_str()).unwrap_or("")
}

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

fn rt_err(msg: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(msg.into(), Position::NONE))
}

fn code_from_str(s: &str) -> Option<Code> {
    Code::ALL.into_iter().find(|c| c.as_str() == s)
}

/// Names of the helper functions registered for rules (used by the unknown-helper lint).
pub const HELPERS: &[&str] = &[
    "allow",
    "deny",
    "challenge",
    "review",
    "score",
    "in_list",
    "contains_any",
    "ip_in",
    "rate_limit",
    "count",
    "waf",
    "waf_value",
    "waf_part",
    "circuit_open",
    "distinct",
    "claim",
    "claimed",
    "reputation",
    "report",
];

/// The helpers that count or read counted state, which the pre-check may call as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counting {
    RateLimit,
    Count,
    Distinct,
    Reputation,
    ReputationOfRequest,
}

/// A counting call the pre-check made: the helper, its arguments' digest ([`call_id`]), and its
/// answer (`rate_limit`: 1 allowed, 0 refused) or error.
#[derive(Debug)]
pub(super) struct Recorded {
    pub(super) helper: Counting,
    pub(super) id: u64,
    pub(super) answer: RhaiResult<i64>,
}

/// A digest of a counting call's arguments: the replay answers a call only with the record of the
/// same helper on the same arguments.
pub(super) fn call_id(key: &str, item: &str, numbers: [f64; 2]) -> u64 {
    use xxhash_rust::xxh3::xxh3_64_with_seed;
    let seed = numbers[0].to_bits() ^ numbers[1].to_bits().rotate_left(29);
    xxh3_64_with_seed(item.as_bytes(), xxh3_64_with_seed(key.as_bytes(), seed))
}

thread_local! {
    /// The pre-check's calls of the rule now in the interpreter, last call first: the interpreter
    /// makes the same calls in the same order, and each is answered from here instead of counting
    /// twice (see `with_replay`).
    static REPLAY: std::cell::RefCell<Vec<Recorded>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Puts the outer record back however the interpreter's run ends (a panic included).
struct RestoreReplay(Option<Vec<Recorded>>);

impl Drop for RestoreReplay {
    fn drop(&mut self) {
        if let Some(outer) = self.0.take() {
            REPLAY.with(|r| *r.borrow_mut() = outer);
        }
    }
}

/// Runs `run` (the interpreter, on the rule the pre-check could not rule out) with the counting
/// calls the pre-check made, in its order, answered from its record.
fn with_replay<T>(mut calls: Vec<Recorded>, run: impl FnOnce() -> T) -> T {
    calls.reverse();
    let mut restore = RestoreReplay(Some(REPLAY.with(|r| r.replace(calls))));
    let out = run();
    let outer = restore.0.take().unwrap_or_default();
    let left = REPLAY.with(|r| r.replace(outer));
    debug_assert!(
        left.is_empty(),
        "the interpreter did not repeat the pre-check's calls: {left:?}"
    );
    out
}

/// `call`, unless the pre-check already made it (the same helper on the same arguments, `id`):
/// then its recorded answer.
fn replayed(
    helper: Counting,
    id: impl FnOnce() -> u64,
    call: impl FnOnce() -> RhaiResult<i64>,
) -> RhaiResult<i64> {
    let recorded = REPLAY.with(|r| {
        let mut r = r.borrow_mut();
        let last = r.last()?;
        if last.helper == helper && last.id == id() {
            return r.pop().map(|rec| rec.answer);
        }
        // The pre-check evaluates in the interpreter's order, so this cannot happen; if it did,
        // counting again beats answering with another call's value.
        debug_assert!(
            false,
            "{helper:?} called where the pre-check called {last:?}"
        );
        r.clear();
        None
    });
    recorded.unwrap_or_else(call)
}

/// `rate_limit(key, rate, burst)`: one GCRA step; `true` while the key is within its rate.
pub(super) fn rate_limit(
    st: Option<&RuleState>,
    key: &str,
    rate: f64,
    burst: i64,
) -> RhaiResult<bool> {
    let st = st.ok_or_else(|| rt_err("rate_limit: no limiter state".into()))?;
    let burst =
        u32::try_from(burst).map_err(|_| rt_err("rate_limit: burst out of range".into()))?;
    let g = by_policy(
        "rate_limit",
        "limits",
        st.policies.limits,
        st.limiter
            .gcra(&ns_key(key), EVAL_NOW.with(|n| n.get()), rate, burst),
        crate::limits::Gcra {
            allowed: true,
            retry_after_ms: 0,
        },
    )?;
    if !g.allowed {
        LAST_RETRY.with(|r| r.set(g.retry_after_ms));
    }
    Ok(g.allowed)
}

/// `count(key, window_ms)`: adds one to the key's sliding-window counter; its new value.
pub(super) fn count(st: Option<&RuleState>, key: &str, window_ms: i64) -> RhaiResult<i64> {
    let st = st.ok_or_else(|| rt_err("count: no limiter state".into()))?;
    by_policy(
        "count",
        "counters",
        st.policies.counters,
        st.limiter
            .incr(&ns_key(key), EVAL_NOW.with(|n| n.get()), window_ms, 1),
        0,
    )
}

/// `distinct(key, item, window_ms)`: adds `item` (unless empty) to the key's distinct set; its
/// estimated size.
pub(super) fn distinct(st: &RuleState, key: &str, item: &str, window_ms: i64) -> RhaiResult<i64> {
    let now = EVAL_NOW.with(|n| n.get());
    let n = if item.is_empty() {
        st.distinct.count(&ns_key(key), now, window_ms)
    } else {
        st.distinct.add(&ns_key(key), item, now, window_ms)
    };
    by_policy("distinct", "distinct", st.policies.distinct, n, 0).map(|n| n as i64)
}

fn reputation_kind(helper: &str, kind: &str) -> RhaiResult<()> {
    if REPUTATION_KINDS.contains(&kind) {
        Ok(())
    } else {
        Err(rt_err(format!(
            "{helper}: kind must be one of ip, device, ja3, user (not {kind:?})"
        )))
    }
}

/// `reputation(kind, value)`: the points against one client attribute.
pub(super) fn reputation(st: &RuleState, kind: &str, value: &str) -> RhaiResult<i64> {
    reputation_kind("reputation", kind)?;
    by_policy(
        "reputation",
        "reputation",
        st.policies.reputation,
        st.reputation(kind, value, EVAL_NOW.with(|n| n.get())),
        0,
    )
}

/// `reputation(req)`: the worst reputation of the request's IP, device, JA3 and user.
pub(super) fn reputation_of_request(st: &RuleState, r: &ReqData) -> RhaiResult<i64> {
    let pairs = [
        ("ip", r.ip()),
        ("device", r.device_id()),
        ("ja3", r.ja3()),
        ("user", r.user()),
    ];
    by_policy(
        "reputation",
        "reputation",
        st.policies.reputation,
        st.worst_reputation(&pairs, EVAL_NOW.with(|n| n.get())),
        0,
    )
}

fn build_engine(lists: Arc<Lists>, state: Option<RuleState>) -> rhai::Engine {
    let full_state = state.clone();
    let mut e = rhai::Engine::new();
    e.set_max_operations(20_000)
        .set_max_call_levels(8)
        .set_max_expr_depths(32, 16)
        .set_max_string_size(1 << 20)
        .set_max_array_size(1024)
        .set_max_map_size(1024)
        .set_strict_variables(true)
        // Rhai's string interner is one lock for the whole engine, and with `sync` a thread that
        // finds it taken sleeps 10 ms before trying again: two workers judging at once stalled
        // each other, one decision in a hundred taking 10 ms. Interning saves a few allocations.
        .set_max_strings_interned(0);
    e.on_print(|_| {}).on_debug(|_, _, _| {});

    e.register_type_with_name::<Req>("Request");
    // One table of getters for Rhai and the pre-check.
    for (name, get) in precheck::FIELDS {
        e.register_get(name, move |r: &mut Req| -> ImmutableString {
            get(r).into()
        });
    }
    e.register_fn("header", |r: &mut Req, name: &str| -> ImmutableString {
        r.header(name).into()
    })
    .register_fn("param", |r: &mut Req, name: &str| r.param(name));

    e.register_type_with_name::<Outcome>("Outcome");
    e.register_fn("allow", || Outcome::Allow);
    e.register_fn("deny", |reason: &str| Outcome::Terminal {
        action: Action::Deny,
        code: Code::RuleDeny,
        reason: reason.to_string(),
    });
    e.register_fn("deny", |code: &str, reason: &str| -> RhaiResult<Outcome> {
        let code = code_from_str(code)
            .filter(|c| !matches!(c, Code::Ok | Code::RuleChallenge | Code::RuleReview))
            .ok_or_else(|| rt_err(format!("deny: {code:?} is not a deny code")))?;
        Ok(Outcome::Terminal {
            action: Action::Deny,
            code,
            reason: reason.to_string(),
        })
    });
    e.register_fn("challenge", |reason: &str| Outcome::Terminal {
        action: Action::Challenge,
        code: Code::RuleChallenge,
        reason: reason.to_string(),
    });
    e.register_fn("review", |reason: &str| Outcome::Terminal {
        action: Action::Review,
        code: Code::RuleReview,
        reason: reason.to_string(),
    });
    e.register_fn("score", |points: i64, reason: &str| Outcome::Score {
        points,
        reason: reason.to_string(),
    });

    let l = lists.clone();
    e.register_fn(
        "in_list",
        move |list: &str, value: &str| -> RhaiResult<bool> {
            l.in_list(list, value)
                .ok_or_else(|| rt_err(format!("in_list: no string list {list:?}")))
        },
    );
    let l = lists.clone();
    e.register_fn(
        "contains_any",
        move |list: &str, value: &str| -> RhaiResult<bool> {
            l.contains_any(list, value)
                .ok_or_else(|| rt_err(format!("contains_any: no string list {list:?}")))
        },
    );
    let l = lists;
    e.register_fn("ip_in", move |list: &str, ip: &str| -> RhaiResult<bool> {
        l.ip_in(list, ip)
            .ok_or_else(|| rt_err(format!("ip_in: no IP list {list:?}")))
    });

    e.register_fn("waf", |r: &mut Req| -> ImmutableString {
        r.waf_name().into()
    });
    e.register_fn("waf_part", |r: &mut Req| -> ImmutableString {
        r.waf_part().into()
    });
    e.register_fn("waf_value", |v: &str| -> ImmutableString {
        waf_value(v).into()
    });

    let breakers = state.as_ref().map(|s| s.breakers.clone());
    e.register_fn(
        "circuit_open",
        move |r: &mut Req, cfg: rhai::Map| -> RhaiResult<bool> {
            let b = breakers
                .as_ref()
                .ok_or_else(|| rt_err("circuit_open: no breaker state".into()))?;
            let d = crate::breaker::BreakerConfig::default();
            let num = |k: &str, dflt: f64| -> RhaiResult<f64> {
                match cfg.get(k) {
                    None => Ok(dflt),
                    Some(v) => v
                        .as_float()
                        .or_else(|_| v.as_int().map(|i| i as f64))
                        .map_err(|_| rt_err(format!("circuit_open: {k} must be a number"))),
                }
            };
            for k in cfg.keys() {
                if ![
                    "window_ms",
                    "min_requests",
                    "error_ratio",
                    "slow_ms",
                    "slow_ratio",
                    "open_ms",
                ]
                .contains(&k.as_str())
                {
                    return Err(rt_err(format!("circuit_open: unknown setting {k:?}")));
                }
            }
            let c = crate::breaker::BreakerConfig {
                window_ms: num("window_ms", d.window_ms as f64)?.max(1.0) as i64,
                min_requests: num("min_requests", d.min_requests as f64)?.max(1.0) as u64,
                error_ratio: num("error_ratio", d.error_ratio)?,
                slow_ms: num("slow_ms", d.slow_ms as f64)?.max(0.0) as u64,
                slow_ratio: num("slow_ratio", d.slow_ratio)?,
                open_ms: num("open_ms", d.open_ms as f64)?.max(1.0) as i64,
            };
            let key = crate::breaker::breaker_key(r.app(), r.path());
            Ok(!b.allow(&key, EVAL_NOW.with(|n| n.get()), c))
        },
    );

    // The counting helpers: one definition each (below), which the pre-check calls too; what it
    // already asked is answered from its record (`replayed`), never asked twice.
    let st = state.clone();
    e.register_fn("rate_limit", move |key: &str, rate: i64, burst: i64| {
        let rate = rate as f64;
        replayed(
            Counting::RateLimit,
            || call_id(key, "", [rate, burst as f64]),
            || rate_limit(st.as_ref(), key, rate, burst).map(i64::from),
        )
        .map(|allowed| allowed != 0)
    });
    let st = state.clone();
    e.register_fn("rate_limit", move |key: &str, rate: f64, burst: i64| {
        replayed(
            Counting::RateLimit,
            || call_id(key, "", [rate, burst as f64]),
            || rate_limit(st.as_ref(), key, rate, burst).map(i64::from),
        )
        .map(|allowed| allowed != 0)
    });
    let st = state;
    e.register_fn("count", move |key: &str, window_ms: i64| {
        replayed(
            Counting::Count,
            || call_id(key, "", [window_ms as f64, 0.0]),
            || count(st.as_ref(), key, window_ms),
        )
    });
    if let Some(st) = full_state {
        register_state_helpers(&mut e, st);
    }
    e
}

fn register_state_helpers(e: &mut rhai::Engine, st: RuleState) {
    let now = || EVAL_NOW.with(|n| n.get());
    let s = st.clone();
    e.register_fn("distinct", move |key: &str, item: &str, window_ms: i64| {
        replayed(
            Counting::Distinct,
            || call_id(key, item, [window_ms as f64, 0.0]),
            || distinct(&s, key, item, window_ms),
        )
    });
    let s = st.clone();
    e.register_fn(
        "claim",
        move |pool: &str, user: &str, stock: i64| -> RhaiResult<ImmutableString> {
            let stock =
                u64::try_from(stock).map_err(|_| rt_err("claim: stock must be ≥ 0".into()))?;
            let c = if IN_SHADOW.with(|f| f.get()) {
                s.quotas.peek(pool, user, stock)
            } else {
                s.quotas.claim(pool, user, stock, now())
            };
            // A claim that cannot be recorded is never granted: `exhausted` is the neutral answer.
            by_policy(
                "claim",
                "quotas",
                s.policies.quotas,
                c,
                crate::quota::Claim::Exhausted,
            )
            .map(|c| c.as_str().into())
        },
    );
    let s = st.clone();
    e.register_fn("claimed", move |pool: &str| -> RhaiResult<i64> {
        by_policy(
            "claimed",
            "quotas",
            s.policies.quotas,
            s.quotas.claimed(pool),
            0,
        )
        .map(|n| n as i64)
    });
    let s = st.clone();
    e.register_fn("reputation", move |kind: &str, value: &str| {
        replayed(
            Counting::Reputation,
            || call_id(kind, value, [0.0, 0.0]),
            || reputation(&s, kind, value),
        )
    });
    let s = st.clone();
    e.register_fn("reputation", move |r: &mut Req| {
        replayed(
            Counting::ReputationOfRequest,
            || call_id("", "", [0.0, 0.0]),
            || reputation_of_request(&s, r),
        )
    });
    let s = st;
    e.register_fn(
        "report",
        move |kind: &str, value: &str, points: i64| -> RhaiResult<()> {
            reputation_kind("report", kind)?;
            if IN_SHADOW.with(|f| f.get()) {
                return Ok(());
            }
            by_policy(
                "report",
                "reputation",
                s.policies.reputation,
                s.report(kind, value, points, now()),
                (),
            )
        },
    );
}

struct TierIndex {
    rules: Vec<Rule>,
    /// Indices (in priority order) of the rules for each app named by some rule's `apps`.
    by_app: HashMap<String, Vec<usize>>,
    /// Indices of the rules without an `apps` scope (for every other app).
    any_app: Vec<usize>,
}

impl TierIndex {
    fn build(mut rules: Vec<Rule>) -> TierIndex {
        rules.sort_by(|a, b| {
            a.meta
                .priority
                .cmp(&b.meta.priority)
                .then_with(|| a.meta.name.cmp(&b.meta.name))
        });
        let any_app: Vec<usize> = (0..rules.len())
            .filter(|i| rules[*i].meta.apps.is_none())
            .collect();
        let mut by_app: HashMap<String, Vec<usize>> = HashMap::new();
        for r in &rules {
            for app in r.meta.apps.iter().flatten() {
                by_app.entry(app.clone()).or_default();
            }
        }
        for (app, idx) in by_app.iter_mut() {
            *idx = (0..rules.len())
                .filter(|i| {
                    rules[*i]
                        .meta
                        .apps
                        .as_ref()
                        .is_none_or(|apps| apps.iter().any(|a| a == app))
                })
                .collect();
        }
        TierIndex {
            rules,
            by_app,
            any_app,
        }
    }

    fn for_app(&self, app: &str) -> &[usize] {
        self.by_app.get(app).unwrap_or(&self.any_app)
    }
}

/// A compiled, validated, immutable rule set.
pub struct RuleSet {
    /// Unique per compiled set in this process (keys the per-thread resolution cache).
    id: u64,
    version: String,
    engine: rhai::Engine,
    /// The lists the helpers read (also read by the rules' pre-checks).
    lists: Arc<Lists>,
    state: Option<RuleState>,
    tiers: [TierIndex; 3],
    settings: RuleSettings,
    counts: SetCounts,
}

/// Adds the evaluations it counted to the set's counter when the tier ends, however it ends.
struct Tally<'a>(&'a AtomicU64, u64);

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.0.fetch_add(self.1, Ordering::Relaxed);
        }
    }
}

/// The set's evaluation and error counters, written by every worker, on a cache line of their own:
/// next to the read-mostly fields (the engine, the lists) they would make every rule's reads of
/// those miss on the other cores.
#[derive(Default)]
#[repr(align(128))]
struct SetCounts {
    evaluations: AtomicU64,
    errors: AtomicU64,
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("version", &self.version)
            .field("rules", &self.rule_count())
            .finish()
    }
}

/// Per-rule counters and metadata, for the admin API and metrics.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleInfo {
    #[serde(flatten)]
    pub meta: RuleMeta,
    pub hits: u64,
    pub errors: u64,
}

fn meta_error(file: &str, line: usize, message: impl Into<String>) -> RuleError {
    RuleError {
        file: file.to_string(),
        line,
        column: 1,
        message: message.into(),
    }
}

fn parse_meta(src: &Source, tier: Tier, errs: &mut Vec<RuleError>) -> Option<RuleMeta> {
    let mut fields: HashMap<&str, (usize, &str)> = HashMap::new();
    for (i, line) in src.text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        let Some((k, v)) = rest.split_once(':') else {
            errs.push(meta_error(
                &src.path,
                i + 1,
                "metadata lines look like `//! key: value`",
            ));
            continue;
        };
        let key = k.trim();
        if ![
            "name",
            "priority",
            "mode",
            "owner",
            "description",
            "apps",
            "routes",
            "tier",
        ]
        .contains(&key)
        {
            errs.push(meta_error(
                &src.path,
                i + 1,
                format!("unknown metadata key {key:?}"),
            ));
            continue;
        }
        if fields.insert(key, (i + 1, v.trim())).is_some() {
            errs.push(meta_error(
                &src.path,
                i + 1,
                format!("metadata key {key:?} given twice"),
            ));
        }
    }
    let before = errs.len();
    let mut required = |k: &str| -> String {
        match fields.get(k) {
            Some((_, v)) if !v.is_empty() => v.to_string(),
            _ => {
                errs.push(meta_error(
                    &src.path,
                    1,
                    format!("missing metadata `//! {k}: …`"),
                ));
                String::new()
            }
        }
    };
    let name = required("name");
    let owner = required("owner");
    let description = required("description");
    let priority_raw = required("priority");
    let priority = match priority_raw.parse::<i64>() {
        Ok(p) => p,
        Err(_) => {
            if !priority_raw.is_empty() {
                let line = fields.get("priority").map(|x| x.0).unwrap_or(1);
                errs.push(meta_error(&src.path, line, "priority must be an integer"));
            }
            0
        }
    };
    let mode = match fields.get("mode").map(|x| x.1) {
        None | Some("enforce") => Mode::Enforce,
        Some("shadow") => Mode::Shadow,
        Some(other) => {
            let line = fields["mode"].0;
            errs.push(meta_error(
                &src.path,
                line,
                format!("mode must be enforce or shadow, not {other:?}"),
            ));
            Mode::Enforce
        }
    };
    if let Some((line, t)) = fields.get("tier") {
        if *t != tier.as_str() {
            errs.push(meta_error(
                &src.path,
                *line,
                format!(
                    "tier {t:?} does not match the directory {:?}",
                    tier.as_str()
                ),
            ));
        }
    }
    let split = |v: &str| -> Vec<String> {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let apps = fields
        .get("apps")
        .map(|x| split(x.1))
        .filter(|a| !a.iter().any(|x| x == "*"));
    let routes = fields.get("routes").map(|x| split(x.1)).unwrap_or_default();
    for r in &routes {
        if !r.starts_with('/') {
            let line = fields["routes"].0;
            errs.push(meta_error(
                &src.path,
                line,
                format!("route {r:?} must start with '/'"),
            ));
        }
    }
    if errs.len() > before {
        return None;
    }
    Some(RuleMeta {
        name,
        tier: tier.as_str(),
        priority,
        mode,
        owner,
        description,
        apps,
        routes,
        file: src.path.clone(),
    })
}

/// A token of Rhai source as the lints see it.
enum Tok<'a> {
    /// An identifier or keyword, with its byte offset.
    Ident(usize, &'a str),
    /// A string or character literal.
    Str,
    /// Any other non-whitespace byte.
    Punct(u8),
}

/// The tokens of a script, comments and whitespace skipped: the small scanner behind the lints.
fn tokens(text: &str) -> impl Iterator<Item = Tok<'_>> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            } else if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            } else if c == b'"' || c == b'`' || c == b'\'' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += 1 + (bytes[i] == b'\\') as usize;
                }
                i += 1;
                return Some(Tok::Str);
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return Some(Tok::Ident(start, &text[start..i]));
            } else {
                i += 1;
                if !c.is_ascii_whitespace() {
                    return Some(Tok::Punct(c));
                }
            }
        }
        None
    })
}

/// Whether the identifier at `start..start + len` is called: `(` follows, spaces allowed.
fn called(text: &str, start: usize, len: usize) -> bool {
    text[start + len..].trim_start().starts_with('(')
}

/// Whether a script ends its tier on every run: a call of `allow`, `deny`, `challenge` or
/// `review` at the top level, outside any block (Rhai's `if` and `switch` bodies are blocks).
fn always_terminal(text: &str) -> bool {
    let (mut depth, mut prev_dot) = (0i32, false);
    for t in tokens(text) {
        match t {
            Tok::Ident(start, name) => {
                if depth == 0
                    && !prev_dot
                    && matches!(name, "allow" | "deny" | "challenge" | "review")
                    && called(text, start, name.len())
                {
                    return true;
                }
                prev_dot = false;
            }
            Tok::Str => prev_dot = false,
            Tok::Punct(c) => {
                match c {
                    b'{' | b'(' | b'[' => depth += 1,
                    b'}' | b')' | b']' => depth -= 1,
                    _ => {}
                }
                prev_dot = c == b'.';
            }
        }
    }
    false
}

/// Whether every request `later` applies to also reaches `earlier`.
fn covers(earlier: &RuleMeta, later: &RuleMeta) -> bool {
    let apps = match (&earlier.apps, &later.apps) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(e), Some(l)) => l.iter().all(|a| e.contains(a)),
    };
    let route_covers = |e: &str, r: &str| match e.strip_suffix('*') {
        Some(prefix) => r.starts_with(prefix),
        None => e == r,
    };
    let routes = earlier.routes.is_empty()
        || (!later.routes.is_empty()
            && later
                .routes
                .iter()
                .all(|r| earlier.routes.iter().any(|e| route_covers(e, r))));
    apps && routes
}

/// Lint: rules that can never run because an earlier enforced rule of the same tier answers every
/// request they apply to.
fn unreachable_rules(rules: &mut [Rule]) -> Vec<RuleError> {
    rules.sort_by(|a, b| {
        a.meta
            .priority
            .cmp(&b.meta.priority)
            .then_with(|| a.meta.name.cmp(&b.meta.name))
    });
    let mut errs = Vec::new();
    for (j, later) in rules.iter().enumerate() {
        let blocker = rules[..j].iter().find(|r| {
            r.always_terminal && r.meta.mode == Mode::Enforce && covers(&r.meta, &later.meta)
        });
        if let Some(b) = blocker {
            errs.push(meta_error(
                &later.meta.file,
                1,
                format!(
                    "unreachable rule: {:?} ({}, priority {}) answers every request this rule applies to, first",
                    b.meta.name, b.meta.file, b.meta.priority
                ),
            ));
        }
    }
    errs
}

/// Lint: calls of functions that are neither helpers, standard-library functions nor defined in
/// the script. A small scanner that skips strings and comments and looks for `ident(` not preceded
/// by `.` (method calls resolve against the value's type) or `fn `.
fn unknown_calls(src: &Source, engine: &rhai::Engine) -> Vec<RuleError> {
    let text = &src.text;
    let mut defined: Vec<&str> = Vec::new();
    let mut calls: Vec<(usize, &str)> = Vec::new();
    let (mut prev_dot, mut prev_fn) = (false, false);
    for t in tokens(text) {
        match t {
            Tok::Ident(start, ident) => {
                if prev_fn {
                    defined.push(ident);
                } else if !prev_dot && called(text, start, ident.len()) {
                    calls.push((start, ident));
                }
                prev_fn = ident == "fn";
                prev_dot = false;
            }
            Tok::Str => prev_dot = false,
            Tok::Punct(c) => {
                prev_dot = c == b'.';
                prev_fn = false;
            }
        }
    }
    const KEYWORDS: &[&str] = &[
        "if",
        "else",
        "while",
        "loop",
        "for",
        "in",
        "return",
        "switch",
        "fn",
        "let",
        "const",
        "throw",
        "try",
        "catch",
        "break",
        "continue",
        "do",
        "until",
        "print",
        "debug",
        "type_of",
        "is_def_var",
        "is_def_fn",
        "Fn",
        "call",
        "curry",
        "eval",
        "this",
    ];
    let known_std: std::collections::HashSet<String> = engine
        .gen_fn_signatures(true)
        .into_iter()
        .filter_map(|sig| sig.split('(').next().map(|n| n.trim().to_string()))
        .collect();
    calls
        .into_iter()
        .filter(|(_, name)| {
            !KEYWORDS.contains(name)
                && !HELPERS.contains(name)
                && !defined.contains(name)
                && !known_std.contains(*name)
        })
        .map(|(offset, name)| {
            let line = text[..offset].matches('\n').count() + 1;
            let column = offset - text[..offset].rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
            RuleError {
                file: src.path.clone(),
                line,
                column,
                message: format!("unknown helper or function `{name}`"),
            }
        })
        .collect()
}

/// A rule set's version: the content hash over every file's path and text (in path order), the
/// same whoever computes it (server, pipeline, bundle manifest).
pub fn content_version(sources: &[Source]) -> String {
    let mut sorted: Vec<&Source> = sources.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut h = Sha256::new();
    for s in &sorted {
        h.update((s.path.len() as u64).to_le_bytes());
        h.update(s.path.as_bytes());
        h.update((s.text.len() as u64).to_le_bytes());
        h.update(s.text.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

impl RuleSet {
    /// The empty rule set: every tier passes.
    pub fn empty(settings: RuleSettings) -> RuleSet {
        let lists = Arc::new(Lists::default());
        RuleSet {
            id: next_set_id(),
            version: "none".into(),
            engine: build_engine(lists.clone(), None),
            lists,
            state: None,
            tiers: [
                TierIndex::build(Vec::new()),
                TierIndex::build(Vec::new()),
                TierIndex::build(Vec::new()),
            ],
            settings,
            counts: SetCounts::default(),
        }
    }

    /// Compiles and validates a whole rule set. Returns every failure, located, or the set.
    pub fn compile(
        sources: &[Source],
        settings: RuleSettings,
        state: &RuleState,
    ) -> Result<RuleSet, Vec<RuleError>> {
        let mut errs = Vec::new();
        let mut sorted: Vec<&Source> = sources.iter().collect();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));

        let version = content_version(sources);

        // Lists first: rules refer to them.
        let mut lists = Lists::default();
        for s in sorted.iter().filter(|s| s.path.starts_with("lists/")) {
            let file = s.path.trim_start_matches("lists/");
            let Some((name, kind)) = file.rsplit_once('.') else {
                errs.push(meta_error(
                    &s.path,
                    1,
                    "list files are lists/<name>.txt or lists/<name>.ips",
                ));
                continue;
            };
            match kind {
                "txt" => {
                    lists.strings.insert(
                        name.to_string(),
                        StringList::from_entries(list_entries(&s.text)),
                    );
                }
                "ips" => match IpList::from_entries(list_entries(&s.text)) {
                    Ok(l) => {
                        lists.ips.insert(name.to_string(), l);
                    }
                    Err(e) => {
                        let line = s
                            .text
                            .lines()
                            .position(|l| l.contains(e.split('"').nth(1).unwrap_or("\u{0}")))
                            .map(|p| p + 1)
                            .unwrap_or(1);
                        errs.push(meta_error(&s.path, line, e));
                    }
                },
                _ => errs.push(meta_error(
                    &s.path,
                    1,
                    "list files end in .txt (strings) or .ips (IP/CIDR)",
                )),
            }
        }
        let lists = Arc::new(lists);
        let engine = build_engine(lists.clone(), Some(state.clone()));

        let mut per_tier: [Vec<Rule>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        let mut names: HashMap<String, String> = HashMap::new();
        for s in sorted.iter().filter(|s| s.path.ends_with(".rhai")) {
            let tier = s.path.split('/').next().and_then(Tier::from_dir);
            let Some(tier) = tier.filter(|_| s.path.matches('/').count() >= 1) else {
                errs.push(meta_error(
                    &s.path,
                    1,
                    "rules live in edge/, gateway/ or business/",
                ));
                continue;
            };
            let meta = parse_meta(s, tier, &mut errs);
            let mut compile_scope = Scope::new();
            // A variable, not a constant: the optimiser folds constants into the AST, and would
            // evaluate helpers such as `waf(req)` once, at compile time, on an empty request.
            // (At run time `req` is a constant, so a rule cannot reassign it.)
            compile_scope.push("req", Req::default());
            let ast = match engine.compile_with_scope(&compile_scope, &s.text) {
                Ok(ast) => Some(ast),
                Err(e) => {
                    let p = e.position();
                    errs.push(RuleError {
                        file: s.path.clone(),
                        line: p.line().unwrap_or(1),
                        column: p.position().unwrap_or(1),
                        message: e.err_type().to_string(),
                    });
                    None
                }
            };
            errs.extend(unknown_calls(s, &engine));
            if let (Some(meta), Some(ast)) = (meta, ast) {
                if let Some(first) = names.insert(meta.name.clone(), s.path.clone()) {
                    errs.push(meta_error(
                        &s.path,
                        1,
                        format!("duplicate rule name {:?} (also in {first})", meta.name),
                    ));
                    continue;
                }
                per_tier[tier.index()].push(Rule {
                    meta,
                    always_terminal: always_terminal(&s.text),
                    precheck: precheck::Precheck::compile(&ast),
                    ast,
                    errors: AtomicU64::new(0),
                    hits: AtomicU64::new(0),
                });
            }
        }
        for s in sorted.iter() {
            if !s.path.ends_with(".rhai")
                && !s.path.starts_with("lists/")
                && !s.path.ends_with(".md")
            {
                errs.push(meta_error(&s.path, 1, "unexpected file in the rule set"));
            }
        }
        for rules in per_tier.iter_mut() {
            errs.extend(unreachable_rules(rules));
        }
        if !errs.is_empty() {
            errs.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
            errs.dedup();
            return Err(errs);
        }
        let [e, g, b] = per_tier;
        Ok(RuleSet {
            id: next_set_id(),
            version,
            engine,
            lists,
            state: Some(state.clone()),
            tiers: [
                TierIndex::build(e),
                TierIndex::build(g),
                TierIndex::build(b),
            ],
            settings,
            counts: SetCounts::default(),
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// The engine-wide state the set's helpers use (none for the empty set).
    pub fn state(&self) -> Option<&RuleState> {
        self.state.as_ref()
    }

    pub fn rule_count(&self) -> usize {
        self.tiers.iter().map(|t| t.rules.len()).sum()
    }

    pub fn settings(&self) -> &RuleSettings {
        &self.settings
    }

    /// Rule metadata and counters, in tier and priority order.
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.tiers
            .iter()
            .flat_map(|t| t.rules.iter())
            .map(|r| RuleInfo {
                meta: r.meta.clone(),
                hits: r.hits.load(Ordering::Relaxed),
                errors: r.errors.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Total rule evaluations and errors (errors include bound violations).
    pub fn counters(&self) -> (u64, u64) {
        (
            self.counts.evaluations.load(Ordering::Relaxed),
            self.counts.errors.load(Ordering::Relaxed),
        )
    }

    fn eval(
        &self,
        rule: &Rule,
        req: &Req,
        scope: &mut Scope<'static>,
    ) -> Result<Option<Outcome>, String> {
        let mut calls = Vec::new();
        if let Some(p) = &rule.precheck {
            let max_string = self.engine.max_string_size();
            match p.check(req, &self.lists, max_string, self.state.as_ref()) {
                precheck::Checked::RuledOut => return Ok(None),
                precheck::Checked::Run(made) => calls = made,
            }
        }
        // The scope (`req`) is made for the first rule of the tier that runs in the interpreter.
        if scope.is_empty() {
            scope.push_constant("req", req.clone());
        }
        let base = scope.len();
        let result = with_replay(calls, || self.run(rule, scope));
        scope.rewind(base);
        match result {
            Ok(v) if v.is_unit() => Ok(None),
            Ok(v) => match v.try_cast::<Outcome>() {
                Some(o) => Ok(Some(o)),
                None => Err("the rule must end with allow(), deny(…), challenge(…), review(…), score(…) or nothing".into()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs one rule's statements. Rhai resolves each call (getter, helper, `len`…) through the
    /// engine's modules and caches the answer only from its second use in one cache; a fresh cache
    /// per evaluation (what `eval_ast_with_scope` does) therefore resolves every call every time.
    /// Rules without functions of their own resolve the same names to the same native functions
    /// of this set's engine, so they share one cache per thread and per set, kept across
    /// decisions. A rule that defines functions gets a fresh cache (its names may shadow others).
    fn run(&self, rule: &Rule, scope: &mut Scope<'_>) -> Result<Dynamic, Box<EvalAltResult>> {
        if rule.ast.has_functions() {
            return self.engine.eval_ast_with_scope::<Dynamic>(scope, &rule.ast);
        }
        RESOLUTION.with(|cell| {
            let Ok(mut slot) = cell.try_borrow_mut() else {
                // Re-entered (a helper judged with another set): no sharing.
                return self.engine.eval_ast_with_scope::<Dynamic>(scope, &rule.ast);
            };
            // Two slots: a canary and its stable set alternate on one thread.
            if slot[0].as_ref().is_none_or(|(id, _)| *id != self.id) {
                slot.swap(0, 1);
                if slot[0].as_ref().is_none_or(|(id, _)| *id != self.id) {
                    slot[0] = Some((self.id, rhai::Caches::new()));
                }
            }
            let (_, caches) = slot[0].as_mut().expect("just set");
            let mut global = self.engine.new_global_runtime_state();
            #[allow(deprecated)] // the supported spelling of "evaluate these statements" in 1.x
            self.engine
                .eval_statements_raw(&mut global, caches, scope, rule.ast.statements())
        })
    }

    /// Evaluates one tier for `req`.
    pub fn evaluate_tier(
        &self,
        tier: Tier,
        req: &Req,
        session: &mut RuleSession,
    ) -> Option<Verdict> {
        let index = &self.tiers[tier.index()];
        let ids = index.for_app(req.app());
        if ids.is_empty() {
            return None;
        }
        // One write of the shared counter per tier, not one per rule (see `SetCounts`).
        let mut tally = Tally(&self.counts.evaluations, 0);
        let mut scope = Scope::new();
        EVAL_NOW.with(|n| n.set(req.now_ms));
        for &i in ids {
            let rule = &index.rules[i];
            if !rule.applies_to_route(req.path()) {
                if let Some(t) = session.trace.as_deref_mut() {
                    let shadow = rule.meta.mode == Mode::Shadow;
                    t.rule(
                        &rule.meta.name,
                        shadow,
                        "not for this route".into(),
                        Instant::now(),
                    );
                }
                continue;
            }
            let started = session.trace.is_some().then(Instant::now);
            LAST_RETRY.with(|r| r.set(0));
            STORE_DOWN.with(|d| d.set(None));
            DEGRADED.with(|d| d.set(false));
            IN_SHADOW
                .with(|f| f.set(rule.meta.mode == Mode::Shadow || SIMULATING.with(|s| s.get())));
            tally.1 += 1;
            let outcome = self.eval(rule, req, &mut scope);
            IN_SHADOW.with(|f| f.set(false));
            if let (Some(t), Some(started)) = (session.trace.as_deref_mut(), started) {
                t.rule(
                    &rule.meta.name,
                    rule.meta.mode == Mode::Shadow,
                    trace_outcome(&outcome),
                    started,
                );
            }
            if DEGRADED.with(|d| d.get()) && rule.meta.mode == Mode::Enforce {
                session.degraded = true;
            }
            let outcome = match outcome {
                Ok(o) => o,
                Err(msg) => {
                    rule.errors.fetch_add(1, Ordering::Relaxed);
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    session.errors += 1;
                    if let Some(store) = STORE_DOWN.with(|d| d.take()) {
                        if rule.meta.mode == Mode::Enforce {
                            return Some(Verdict::reject(
                                tier.step(),
                                Action::Deny,
                                Code::StoreUnavailable,
                                &rule.meta.name,
                                Reason::new(format!(
                                    "{msg}; the {store} store fails closed (on_store_error = deny)"
                                )),
                            ));
                        }
                        continue;
                    }
                    if rule.meta.mode == Mode::Enforce
                        && self.settings.on_error[tier.index()] == FailPolicy::Deny
                    {
                        return Some(Verdict::reject(
                            tier.step(),
                            Action::Deny,
                            Code::RuleDeny,
                            &rule.meta.name,
                            Reason::new(format!(
                                "rule failed and the {} tier fails closed: {msg}",
                                tier.as_str()
                            )),
                        ));
                    }
                    continue;
                }
            };
            let Some(outcome) = outcome else { continue };
            rule.hits.fetch_add(1, Ordering::Relaxed);
            if rule.meta.mode == Mode::Shadow {
                if let Outcome::Terminal {
                    action,
                    code,
                    reason,
                } = &outcome
                {
                    session.shadow.push(ShadowHit {
                        tier: tier.as_str().into(),
                        rule: rule.meta.name.clone(),
                        action: *action,
                        code: *code,
                        reason: reason.clone(),
                        version: None,
                    });
                }
                continue;
            }
            match outcome {
                Outcome::Allow => return None,
                Outcome::Score { points, reason } => {
                    session.score += points;
                    session.reasons.push(Reason::new(format!(
                        "{} ({points:+}): {reason}",
                        rule.meta.name
                    )));
                }
                Outcome::Terminal {
                    action,
                    code,
                    reason,
                } => {
                    let mut v = Verdict::reject(
                        tier.step(),
                        action,
                        code,
                        &rule.meta.name,
                        Reason::new(reason),
                    );
                    let retry = LAST_RETRY.with(|r| r.get());
                    if code == Code::RateLimited && retry > 0 {
                        v.retry_after_ms = Some(retry);
                    }
                    return Some(v);
                }
            }
        }
        None
    }

    /// What this set would decide for `req` if it were enforced, without lasting effects: claims
    /// only peek, reputation is not fed, and rate limits, counters and distinct counts use keys
    /// under a prefix of their own (`sim:<version>:`). Returns the refusal (as a shadow hit
    /// carrying this set's version; `None` = it would allow) and the number of rule failures.
    pub fn simulate(&self, req: &Req) -> (Option<ShadowHit>, u64) {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                SIMULATING.with(|s| s.set(false));
                KEY_NS.with(|ns| ns.borrow_mut().clear());
            }
        }
        SIMULATING.with(|s| s.set(true));
        KEY_NS.with(|ns| {
            let mut ns = ns.borrow_mut();
            ns.clear();
            ns.push_str("sim:");
            ns.push_str(&self.version[..self.version.len().min(12)]);
            ns.push(':');
        });
        let _reset = Reset;
        let (verdict, errors) = self.judge(req);
        let hit = verdict.map(|v| ShadowHit {
            tier: v.tier.unwrap_or("business").to_string(),
            rule: v.rule.unwrap_or_default(),
            action: v.action,
            code: v.code,
            reason: v
                .reasons
                .first()
                .map(|r| r.message.clone())
                .unwrap_or_default(),
            version: Some(self.version.clone()),
        });
        (hit, errors)
    }

    /// The three tiers and the score thresholds, as on the decision path (without the anti-replay
    /// steps between them): the refusal, if any, and the number of rule failures.
    pub fn judge(&self, req: &Req) -> (Option<Verdict>, u64) {
        let mut session = RuleSession::default();
        let verdict = [Tier::Edge, Tier::Gateway, Tier::Business]
            .into_iter()
            .find_map(|t| self.evaluate_tier(t, req, &mut session))
            .or_else(|| self.finish(&mut session));
        (verdict, session.errors)
    }

    /// [`RuleSet::judge`] with a trace of every tier and rule.
    pub fn judge_traced(&self, req: &Req) -> (Option<Verdict>, crate::trace::Trace) {
        let mut session = RuleSession::traced();
        let mut verdict = None;
        for t in [Tier::Edge, Tier::Gateway, Tier::Business] {
            session.step(t.as_str());
            verdict = self.evaluate_tier(t, req, &mut session);
            if verdict.is_some() {
                break;
            }
        }
        if verdict.is_none() {
            session.step("score");
            verdict = self.finish(&mut session);
        }
        let tracer = session.trace.take().expect("a traced session");
        let trace = tracer.finish(verdict.as_ref().unwrap_or(&Verdict::allow()));
        (verdict, trace)
    }

    /// After the business tier: the accumulated score against the thresholds.
    pub fn finish(&self, session: &mut RuleSession) -> Option<Verdict> {
        let s = &self.settings;
        let (action, code) = if session.score >= s.deny_score {
            (Action::Deny, Code::RuleDeny)
        } else if session.score >= s.review_score {
            (Action::Review, Code::RuleReview)
        } else if session.score >= s.challenge_score {
            (Action::Challenge, Code::RuleChallenge)
        } else {
            return None;
        };
        let mut v = Verdict::reject(
            Step::Business,
            action,
            code,
            "score",
            Reason::new(format!("risk score {}", session.score)),
        );
        v.reasons.append(&mut session.reasons);
        Some(v)
    }
}

/// Per-decision state while the tiers run.
#[derive(Debug, Default)]
pub struct RuleSession {
    pub score: i64,
    pub reasons: Vec<Reason>,
    pub shadow: Vec<ShadowHit>,
    pub errors: u64,
    /// An enforced rule's store failed and its policy let the decision go on.
    pub degraded: bool,
    /// Set only for a traced decision ([`crate::trace`]).
    pub trace: Option<Box<crate::trace::Tracer>>,
}

impl RuleSession {
    /// A session that records a trace.
    pub fn traced() -> RuleSession {
        RuleSession {
            trace: Some(Box::default()),
            ..RuleSession::default()
        }
    }

    /// Marks the start of a step in the trace (nothing when not tracing).
    #[inline]
    pub fn step(&mut self, step: &'static str) {
        if let Some(t) = self.trace.as_deref_mut() {
            t.step(step);
        }
    }
}

/// The live rule set: one immutable snapshot, swapped whole.
pub struct LiveRules {
    current: ArcSwap<RuleSet>,
}

impl LiveRules {
    pub fn new(set: RuleSet) -> Self {
        LiveRules {
            current: ArcSwap::from_pointee(set),
        }
    }

    pub fn empty() -> Self {
        Self::new(RuleSet::empty(RuleSettings::default()))
    }

    /// Starts from a set that is already shared.
    pub fn from_arc(set: Arc<RuleSet>) -> Self {
        LiveRules {
            current: ArcSwap::new(set),
        }
    }

    /// The snapshot a decision uses from its first tier to its last.
    pub fn snapshot(&self) -> Arc<RuleSet> {
        self.current.load_full()
    }

    /// Publishes a new set; returns the previous one.
    pub fn swap(&self, set: RuleSet) -> Arc<RuleSet> {
        self.current.swap(Arc::new(set))
    }

    /// Publishes a set that is already shared (e.g. a cached compiled version).
    pub fn swap_arc(&self, set: Arc<RuleSet>) -> Arc<RuleSet> {
        self.current.swap(set)
    }
}

impl std::fmt::Debug for LiveRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRules")
            .field("version", &self.snapshot().version())
            .finish()
    }
}

/// A rule's result as a trace line.
fn trace_outcome(o: &Result<Option<Outcome>, String>) -> String {
    match o {
        Ok(None) => "no match".into(),
        Ok(Some(Outcome::Allow)) => "allow".into(),
        Ok(Some(Outcome::Score { points, reason })) => format!("score {points:+}: {reason}"),
        Ok(Some(Outcome::Terminal {
            action,
            code,
            reason,
        })) => format!("{} {}: {reason}", action.as_str(), code.as_str()),
        Err(e) => format!("error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    /// The interner's lock sleeps 10 ms when contended (see `build_engine`): it stays off.
    #[test]
    fn the_rule_engine_interns_no_strings() {
        let e = super::build_engine(Default::default(), None);
        assert_eq!(e.max_strings_interned(), 0);
    }

    /// The keys kept per thread between reads never carry one read's keys into the next.
    #[test]
    fn worst_reputation_reads_only_its_own_pairs() {
        let st = super::RuleState::local(1000);
        st.report("ip", "198.51.100.9", 40, 1_000).unwrap();
        st.report("user", "u1", 5, 1_000).unwrap();
        let read = |pairs: &[(&str, &str)]| st.worst_reputation(pairs, 2_000).unwrap();
        assert_eq!(read(&[("ip", "198.51.100.9"), ("user", "u1")]), 40);
        assert_eq!(read(&[("user", "u1")]), 5);
        assert_eq!(read(&[("ip", ""), ("user", "u2")]), 0);
        assert_eq!(read(&[]), 0);
        // Same text, other kind: another key.
        assert_eq!(read(&[("device", "198.51.100.9")]), 0);
        assert_eq!(st.reputation("ip", "198.51.100.9", 2_000).unwrap(), 40);
    }
}
