//! The counting helpers (`rate_limit`, `count`, `distinct`, `reputation`) and the replay of the
//! pre-check's calls, so that a rule's interpreter run never counts twice.

use super::register::{rt_err, RhaiResult};
use super::request::ReqData;
use super::state::{
    by_policy, ns_key, RuleState, EVAL_NOW, IN_EDGE, LAST_RETRY, REPUTATION_KINDS, RULE_ID,
};
use crate::store::hot::HotKind;
use crate::store::limits::{Planned, PlannedAnswer};

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
    "crs",
    "crs_rules",
    "crs_score",
    "circuit_open",
    "distinct",
    "claim",
    "claimed",
    "reputation",
    "report",
    "rate_limit_ip",
    "count_ip",
];

/// Helpers that write state keyed by data the rule chooses (a user, a device, a header): refused
/// in the edge tier, which runs before the signature is checked (DESIGN §2: unauthenticated input
/// buys no state). A call is a compile error located at it (`lints::edge_writes`); a call the lint
/// cannot see (`Fn("count").call(…)`) fails at run time. The edge tier counts the connection's IP
/// only: `rate_limit_ip`, `count_ip`.
pub const EDGE_REFUSED: &[&str] = &["rate_limit", "count", "distinct", "claim", "report"];

/// Refuses a writing helper in the edge tier (see [`EDGE_REFUSED`]).
pub(super) fn refuse_at_edge(helper: &str) -> RhaiResult<()> {
    if IN_EDGE.with(|f| f.get()) {
        return Err(rt_err(format!(
            "{helper} writes state keyed by what the client claims, and edge rules run before the \
             signature is checked: use rate_limit_ip or count_ip (keyed by the client IP), or move \
             the rule to gateway/"
        )));
    }
    Ok(())
}

/// The key of an IP-keyed edge helper: the rule and the client IP (no IP: none, nothing counted).
fn ip_key(kind: &str, r: &ReqData) -> Option<String> {
    let ip = r.ip();
    (!ip.is_empty()).then(|| format!("{kind}:{:016x}:{ip}", RULE_ID.with(|id| id.get())))
}

/// `rate_limit_ip(req, rate, burst)`: one GCRA step on the client IP's bucket of this rule; `true`
/// while the IP is within its rate (and when the request has no IP). The one rate limit the edge
/// tier may use: the IP is a fact of the connection, not a claim.
pub(super) fn rate_limit_ip(
    st: Option<&RuleState>,
    r: &ReqData,
    rate: f64,
    burst: i64,
) -> RhaiResult<bool> {
    match ip_key("eip", r) {
        Some(key) => IN_EDGE.with(|f| {
            // The IP-keyed helper is allowed wherever it runs: lift the edge guard for the call.
            let was = f.replace(false);
            let out = rate_limit(st, &key, rate, burst);
            f.set(was);
            out
        }),
        None => Ok(true),
    }
}

/// `count_ip(req, window_ms)`: adds one to the client IP's sliding-window counter of this rule;
/// its new value (0 when the request has no IP).
pub(super) fn count_ip(st: Option<&RuleState>, r: &ReqData, window_ms: i64) -> RhaiResult<i64> {
    match ip_key("eic", r) {
        Some(key) => IN_EDGE.with(|f| {
            let was = f.replace(false);
            let out = count(st, &key, window_ms);
            f.set(was);
            out
        }),
        None => Ok(0),
    }
}

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
    pub(super) static REPLAY: std::cell::RefCell<Vec<Recorded>> = const { std::cell::RefCell::new(Vec::new()) };
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
pub(super) fn with_replay<T>(mut calls: Vec<Recorded>, run: impl FnOnce() -> T) -> T {
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
pub(super) fn replayed(
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

thread_local! {
    /// Counting calls already made for the decision on this thread, in the order its rules will
    /// make them, with their answers (see [`prefetched`]).
    static PREFETCHED: std::cell::RefCell<std::collections::VecDeque<(Planned, PlannedAnswer)>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// Hands the answers of counting calls a store made ahead of the rules (in the anti-replay
/// step's round trip, planned by [`super::RuleSet::plan_calls`]) to the `rate_limit` and
/// `distinct` calls of this thread's decision: each call equal to the next planned one takes
/// its answer instead of asking the store. Returns a guard that forgets what was not taken.
pub fn prefetched(answers: impl IntoIterator<Item = (Planned, PlannedAnswer)>) -> PrefetchedGuard {
    let mut answers = answers.into_iter().peekable();
    if answers.peek().is_none() {
        return PrefetchedGuard(false);
    }
    PREFETCHED.with(|p| {
        let mut p = p.borrow_mut();
        p.clear();
        p.extend(answers);
    });
    PrefetchedGuard(true)
}

/// Forgets the prefetched answers not taken when dropped.
#[must_use]
pub struct PrefetchedGuard(bool);

impl Drop for PrefetchedGuard {
    fn drop(&mut self) {
        if self.0 {
            PREFETCHED.with(|p| p.borrow_mut().clear());
        }
    }
}

/// The prefetched answer for this call, when it is the next one planned.
fn take_prefetched(call: impl FnOnce(&Planned) -> bool) -> Option<PlannedAnswer> {
    PREFETCHED.with(|p| {
        let mut p = p.borrow_mut();
        let (next, _) = p.front()?;
        if call(next) {
            p.pop_front().map(|(_, a)| a)
        } else {
            None
        }
    })
}

/// `rate_limit(key, rate, burst)`: one GCRA step; `true` while the key is within its rate.
pub(super) fn rate_limit(
    st: Option<&RuleState>,
    key: &str,
    rate: f64,
    burst: i64,
) -> RhaiResult<bool> {
    refuse_at_edge("rate_limit")?;
    let st = st.ok_or_else(|| rt_err("rate_limit: no limiter state".into()))?;
    let burst =
        u32::try_from(burst).map_err(|_| rt_err("rate_limit: burst out of range".into()))?;
    let key_ns = ns_key(key);
    let now = EVAL_NOW.with(|n| n.get());
    let planned = take_prefetched(|c| {
        matches!(c, Planned::RateLimit(l)
            if l.key == *key_ns && l.rate_per_sec == rate && l.burst == burst)
    });
    let answer = match planned {
        Some(PlannedAnswer::RateLimit(g)) => {
            st.limiter.learn_answer(&key_ns, now, rate, burst, g);
            Ok(g)
        }
        _ => st.limiter.gcra(&key_ns, now, rate, burst),
    };
    let g = by_policy(
        "rate_limit",
        "limits",
        st.policies.limits,
        answer,
        crate::store::limits::Gcra {
            allowed: true,
            retry_after_ms: 0,
        },
    )?;
    if !g.allowed {
        LAST_RETRY.with(|r| r.set(g.retry_after_ms));
    }
    hot(st, HotKind::RateLimit, key, !g.allowed);
    Ok(g.allowed)
}

/// Counts a live call of a counting helper among the instance's hottest keys (a simulated
/// candidate's calls are not traffic).
fn hot(st: &RuleState, kind: HotKind, key: &str, refused: bool) {
    if !super::state::SIMULATING.with(|s| s.get()) {
        st.hot
            .record(kind, key, refused, EVAL_NOW.with(|n| n.get()));
    }
}

/// `count(key, window_ms)`: adds one to the key's sliding-window counter; its new value.
pub(super) fn count(st: Option<&RuleState>, key: &str, window_ms: i64) -> RhaiResult<i64> {
    refuse_at_edge("count")?;
    let st = st.ok_or_else(|| rt_err("count: no limiter state".into()))?;
    hot(st, HotKind::Count, key, false);
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
    if !item.is_empty() {
        refuse_at_edge("distinct")?;
    }
    let now = EVAL_NOW.with(|n| n.get());
    let key = ns_key(key);
    let planned = take_prefetched(|c| {
        matches!(c, Planned::Distinct { key: k, item: i, window_ms: w }
            if *k == *key && i == item && *w == window_ms)
    });
    let n = match planned {
        Some(PlannedAnswer::Distinct(n)) => Ok(n),
        _ if item.is_empty() => st.distinct.count(&key, now, window_ms),
        _ => st.distinct.add(&key, item, now, window_ms),
    };
    by_policy("distinct", "distinct", st.policies.distinct, n, 0).map(|n| n as i64)
}

pub(super) fn reputation_kind(helper: &str, kind: &str) -> RhaiResult<()> {
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
