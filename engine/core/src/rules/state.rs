//! The lasting state of the counting helpers (rate limits, counters, distinct counts, quotas,
//! reputation), which survives rule set swaps, and the store policies each helper answers by.

use super::register::{rt_err, RhaiResult};
use crate::model::{Action, Code, Step, Verdict};
use crate::policy::{FailPolicy, StorePolicies};
use crate::store::hll::{DistinctStore, LocalDistinct};
use crate::store::limits::{LimiterStore, LocalLimiter};
use crate::store::quota::{LocalQuotas, QuotaStore};
use crate::store::StoreError;
use std::sync::Arc;

/// Engine-wide state the counting helpers use; it outlives rule set swaps.
#[derive(Clone)]
pub struct RuleState {
    pub limiter: Arc<dyn LimiterStore>,
    /// Circuit breakers per route, fed by `POST /v1/outcome`.
    pub breakers: Arc<crate::store::breaker::LocalBreakers>,
    pub distinct: Arc<dyn DistinctStore>,
    pub quotas: Arc<dyn QuotaStore>,
    pub reputation: ReputationPolicy,
    /// What a helper does when its store fails.
    pub policies: StorePolicies,
    /// The OWASP Core Rule Set `crs(req)` judges with (none: `crs(req)` finds nothing).
    pub crs: Option<crate::waf::crs::SharedCrs>,
    /// The rate-limit and counter keys called most on this instance (live decisions only).
    pub hot: Arc<crate::store::hot::HotKeys>,
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
/// How every reputation key of the limiter store begins (`rep\x1f<kind>\x1f<value>`): a shared
/// store may treat these keys apart (the Redis store keeps a copy of them in every instance).
pub const REPUTATION_KEY_PREFIX: &str = "rep\u{1f}";

pub const REPUTATION_KINDS: [&str; 4] = ["ip", "device", "ja3", "user"];

/// How long a quota pool lives after its last claim: a campaign's "once per user" must outlast it.
pub const QUOTA_POOL_TTL_MS: i64 = 30 * 24 * 3_600_000;

impl RuleState {
    pub fn local(max_entries: usize) -> Self {
        RuleState {
            limiter: Arc::new(LocalLimiter::new(max_entries)),
            breakers: Arc::new(crate::store::breaker::LocalBreakers::new()),
            distinct: Arc::new(LocalDistinct::new(max_entries)),
            quotas: Arc::new(LocalQuotas::new(max_entries, QUOTA_POOL_TTL_MS)),
            reputation: ReputationPolicy::default(),
            policies: StorePolicies::default(),
            crs: None,
            hot: Default::default(),
        }
    }

    /// This state judging `crs(req)` with `crs`.
    pub fn with_crs(mut self, crs: Option<crate::waf::crs::SharedCrs>) -> Self {
        self.crs = crs;
        self
    }

    pub fn maintain(&self, now_ms: i64) {
        self.limiter.maintain(now_ms);
        self.distinct.maintain(now_ms);
        self.quotas.maintain(now_ms);
    }

    pub(super) fn reputation_key(kind: &str, value: &str) -> String {
        let mut key = String::new();
        Self::write_reputation_key(&mut key, kind, value);
        key
    }

    pub(super) fn write_reputation_key(key: &mut String, kind: &str, value: &str) {
        key.clear();
        key.reserve(kind.len() + value.len() + 5);
        key.push_str(REPUTATION_KEY_PREFIX);
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

    /// Forgets the reputation of (`kind`, `value`) (an operator's repair): its next decisions
    /// start from 0. Whether there was any.
    pub fn reset_reputation(&self, kind: &str, value: &str) -> Result<bool, StoreError> {
        self.limiter.reset(&Self::reputation_key(kind, value))
    }

    /// [`reset_reputation`](Self::reset_reputation) as an instance applies a repair: `here` is
    /// the instance the operator asked. On shared state the others only forget what they
    /// remember of it; on local state each resets its own.
    pub fn repair_reputation(
        &self,
        kind: &str,
        value: &str,
        here: bool,
    ) -> Result<bool, StoreError> {
        self.repair_limit(&Self::reputation_key(kind, value), here)
    }

    /// Clears one rate-limit or counter key (as the rule named it, e.g. `user:alice`) as an
    /// instance applies a repair (see [`repair_reputation`](Self::repair_reputation)).
    pub fn repair_limit(&self, key: &str, here: bool) -> Result<bool, StoreError> {
        if here || !self.limiter.shared() {
            self.limiter.reset(key)
        } else {
            self.limiter.forget_cached(key);
            Ok(true)
        }
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
    pub(super) static EVAL_NOW: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
    /// The function-resolution caches of function-less rules, by set id (most recent first).
    pub(super) static RESOLUTION: std::cell::RefCell<[Option<(u64, rhai::Caches)>; 2]> =
        const { std::cell::RefCell::new([None, None]) };
    /// `retry_after_ms` of the last refused `rate_limit` call on this thread.
    pub(super) static LAST_RETRY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The difficulty of the last `challenge(reason, #{difficulty})` on this thread (0: the
    /// configured one).
    pub(super) static CHALLENGE_DIFFICULTY: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    /// True while a shadow rule runs: helpers with lasting effects (claims, reports) only look.
    pub(super) static IN_SHADOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// True while an edge rule runs (before the signature): helpers that write state keyed by
    /// rule-chosen data refuse (see `helpers::refuse_at_edge`).
    pub(super) static IN_EDGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// A hash of the name of the rule being evaluated: the IP-keyed edge helpers keep one bucket
    /// per rule and IP.
    pub(super) static RULE_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Set by a helper whose store failed under a `Deny` policy: names the store.
    pub(super) static STORE_DOWN: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
    /// Set by a helper whose store failed under an `Allow` policy (it answered its neutral value).
    pub(super) static DEGRADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// True while a candidate rule set is simulated (shadow stage): every rule runs as in shadow.
    pub(super) static SIMULATING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Prefix of the counting helpers' keys while simulating, so a simulated candidate never
    /// spends the stable set's rate limits or counters.
    pub(super) static KEY_NS: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `key` under the simulation prefix, when one is set.
pub(super) fn ns_key(key: &str) -> std::borrow::Cow<'_, str> {
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
pub(super) fn by_policy<T>(
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
