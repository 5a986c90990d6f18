//! State behind the rule helpers that count: GCRA rate limits and sliding-window counters.
//!
//! The state outlives rule set swaps (a limit keeps counting when its rule is edited), so it is
//! owned by the engine and lent to each compiled rule set. [`LimiterStore`] is the trait a shared
//! (Redis) implementation will also provide; [`LocalLimiter`] is the in-process one.
//!
//! **GCRA** (generic cell rate algorithm, as in Redis-cell and Sentinel's pacing): each key keeps a
//! theoretical arrival time `tat`. With emission interval `T = 1000 / rate` ms and tolerance
//! `τ = T · burst`, a request at `now` is allowed when `max(tat, now) + T − now ≤ τ`, and then
//! `tat` becomes `max(tat, now) + T`; otherwise it is refused with
//! `retry_after = max(tat, now) + T − τ − now`. One number per key, O(1), exact.
//!
//! **Sliding-window counter**: the current and previous fixed windows, the previous one weighted
//! by how much of it still overlaps the sliding window (`prev · (1 − elapsed/W) + cur`). Two numbers
//! per key, O(1); the estimate assumes requests were spread evenly over the previous window.

use crate::store::shard::{AtCapacity, ShardedMap};
use crate::store::StoreError;

/// The answer of a rate-limit check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gcra {
    pub allowed: bool,
    /// When refused: how long until one more request would be allowed.
    pub retry_after_ms: u64,
}

/// A rate limit a rule will spend (`rate_limit(key, rate, burst)`), planned before the rule runs
/// so that a shared store can spend it in the round trip of the anti-replay step (see
/// `NonceStore::check_and_insert_limits`). `key` is the limiter's key, as `gcra` takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitCall {
    pub key: String,
    pub rate_per_sec: f64,
    pub burst: u32,
}

/// A counting call a rule will make, planned before the rules run (see
/// `RuleSet::plan_calls`), for a shared store to make in the anti-replay step's round trip.
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    /// `rate_limit(key, rate, burst)`: one GCRA step.
    RateLimit(LimitCall),
    /// `distinct(key, item, window_ms)` with an item: adds it, answers the count. A plan ends
    /// with it (what the rule does with the count is not known ahead).
    Distinct {
        key: String,
        item: String,
        window_ms: i64,
    },
}

/// What a store answered to a [`Planned`] call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlannedAnswer {
    RateLimit(Gcra),
    Distinct(u64),
}

pub trait LimiterStore: Send + Sync {
    /// One request against `key`'s limit of `rate_per_sec` with bursts of up to `burst`.
    fn gcra(
        &self,
        key: &str,
        now_ms: i64,
        rate_per_sec: f64,
        burst: u32,
    ) -> Result<Gcra, StoreError>;
    /// Adds `n` to `key`'s sliding window of `window_ms` and returns the count in the window.
    fn incr(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) -> Result<i64, StoreError>;
    /// `key`'s count in its sliding window of `window_ms`, without creating the key (read from the
    /// store itself: the operator's view and single reads).
    fn get(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<i64, StoreError>;
    /// The counts of several keys, in order; a shared store answers them in one round trip, or
    /// from a copy it keeps current (the Redis store's reputation copy: behind Redis by the
    /// delivery of its change messages).
    fn get_many(
        &self,
        keys: &[String],
        now_ms: i64,
        window_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        keys.iter()
            .map(|k| self.get(k, now_ms, window_ms))
            .collect()
    }
    /// `incr` whose answer nobody waits for (best-effort bookkeeping after a decision); a shared
    /// store sends it without blocking the caller.
    fn incr_detached(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) {
        let _ = self.incr(key, now_ms, window_ms, n);
    }
    /// `key`'s rate-limit state: its theoretical arrival time (ms), `None` when nothing is stored
    /// or it has lapsed. Reads without changing anything (an operator looking; see
    /// [`limit_view`]).
    fn gcra_tat(&self, key: &str, now_ms: i64) -> Result<Option<f64>, StoreError>;
    /// Forgets `key`'s rate limit and sliding window (an operator's repair): the next request
    /// starts it afresh. Whether anything was there (a shared store may not say: `true`).
    fn reset(&self, key: &str) -> Result<bool, StoreError>;
    /// Whether every instance reads the same state (Redis): a repair made by one instance then
    /// holds for all, which only have to [`forget_cached`](Self::forget_cached) what they
    /// remember of the key.
    fn shared(&self) -> bool {
        false
    }
    /// Forgets what this instance remembers of `key` (a cached refusal) without touching the
    /// shared state: another instance reset it.
    fn forget_cached(&self, _key: &str) {}
    /// Whether a `gcra` call on `key` would now be refused from what this instance remembers,
    /// without asking the shared store (a refusal whose retry-after has not ended).
    fn refusal_cached(&self, _key: &str, _now_ms: i64, _rate_per_sec: f64, _burst: u32) -> bool {
        false
    }
    /// The answer another store's batched call gave for a `gcra` step of `key` (so a refusal is
    /// remembered as if this store had made the call).
    fn learn_answer(&self, _key: &str, _now_ms: i64, _rate_per_sec: f64, _burst: u32, _g: Gcra) {}
    /// Drops state that no longer matters.
    fn maintain(&self, now_ms: i64);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a rate limit stands at a moment, for an operator: what `rate_limit` would answer now,
/// without spending anything.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LimitView {
    /// Requests allowed right now before the limit refuses (`burst` when idle).
    pub remaining: u32,
    /// When `remaining` is 0: how long until the next request would be allowed.
    pub retry_after_ms: u64,
    /// How long until the limit is back to its full burst (0 when idle).
    pub full_in_ms: u64,
}

/// [`LimitView`] of a GCRA limit of `rate_per_sec` with bursts of `burst` whose theoretical
/// arrival time is `tat` (`None`: nothing stored), with the arithmetic of [`LimiterStore::gcra`]
/// (emission interval `T = 1000 / rate`, tolerance `τ = T · burst`; a request is allowed when
/// `max(tat, now) + T − now ≤ τ`).
pub fn limit_view(tat: Option<f64>, now_ms: i64, rate_per_sec: f64, burst: u32) -> LimitView {
    let now = now_ms as f64;
    let t = 1000.0 / rate_per_sec;
    let tau = t * burst as f64;
    let debt = tat.map_or(0.0, |tat| (tat - now).max(0.0));
    let remaining = ((tau - debt) / t + 1e-9).floor().clamp(0.0, burst as f64) as u32;
    let retry_after_ms = if remaining == 0 {
        (debt + t - tau).ceil().max(1.0) as u64
    } else {
        0
    };
    LimitView {
        remaining,
        retry_after_ms,
        full_in_ms: debt.ceil() as u64,
    }
}

#[derive(Debug, Clone, Copy)]
enum Cell {
    /// GCRA: theoretical arrival time (ms, fractional) and when the state becomes irrelevant.
    Gcra { tat: f64 },
    /// Sliding window.
    Window(StoredWindow),
}

impl Cell {
    fn expired(&self, now_ms: i64) -> bool {
        match *self {
            Cell::Gcra { tat } => tat < now_ms as f64,
            Cell::Window(w) => now_ms >= w.start + 2 * w.window,
        }
    }
}

/// A sliding-window counter as stored: the current fixed window's start and width, its count and
/// the previous window's count. (Redis keeps the same four numbers in a hash.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredWindow {
    pub start: i64,
    pub window: i64,
    pub cur: i64,
    pub prev: i64,
}

/// What a sliding-window counter reads at `now_ms` for a window of `window_ms`, without changing
/// it: nothing stored, another width, or a window two widths old reads 0; a stored current window
/// that has ended counts as the previous one.
pub fn window_estimate(stored: Option<StoredWindow>, now_ms: i64, window_ms: i64) -> i64 {
    let Some(StoredWindow {
        start,
        window,
        cur,
        prev,
    }) = stored
    else {
        return 0;
    };
    if window_ms <= 0
        || window != window_ms
        || now_ms >= start.saturating_add(window.saturating_mul(2))
    {
        return 0;
    }
    let aligned = now_ms.div_euclid(window_ms) * window_ms;
    let (start, cur, prev) = if aligned > start {
        (aligned, 0, cur) // the stored current window is now the previous one
    } else {
        (start, cur, prev)
    };
    let elapsed = (now_ms - start) as f64 / window_ms as f64;
    (prev as f64 * (1.0 - elapsed)).round() as i64 + cur
}

/// Keys a shared store refused, remembered until their refusal ends so that the store is not asked
/// again meanwhile (envoyproxy/ratelimit's and Upstash's "over limit" cache).
///
/// Exact for GCRA: a refused request changes nothing (only an allowed one moves `tat`, and only
/// later), so until `now + retry_after` the store could only refuse again. Requests allowed on
/// other instances meanwhile move `tat` further: the cache then ends before the store's refusal
/// would, and the store is asked again, so it never refuses what the store would allow, nor the
/// reverse. An entry is keyed by the limit's key and holds the rate and burst it was refused
/// for: the same key under another limit asks the store. Bounded: past `max_entries` a refusal
/// is not remembered; expired entries are purged by [`RefusalCache::purge`].
pub struct RefusalCache {
    entries: ShardedMap<Refused>,
    hits: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Refused {
    rate_bits: u64,
    burst: u32,
    until_ms: i64,
}

impl RefusalCache {
    pub fn new(max_entries: usize) -> Self {
        RefusalCache {
            entries: ShardedMap::new(max_entries),
            hits: Default::default(),
        }
    }

    /// The refusal of `key` under this limit when one is remembered and still running.
    pub fn check(&self, key: &str, now_ms: i64, rate_per_sec: f64, burst: u32) -> Option<Gcra> {
        let until = self.entries.update(key, |r| {
            (r.rate_bits == rate_per_sec.to_bits() && r.burst == burst && r.until_ms > now_ms)
                .then_some(r.until_ms)
        })??;
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Gcra {
            allowed: false,
            retry_after_ms: (until - now_ms) as u64,
        })
    }

    /// Whether [`check`](Self::check) would answer a refusal now (nothing counted).
    pub fn peek(&self, key: &str, now_ms: i64, rate_per_sec: f64, burst: u32) -> bool {
        self.entries
            .update(key, |r| {
                (r.rate_bits == rate_per_sec.to_bits() && r.burst == burst && r.until_ms > now_ms)
                    .then_some(())
            })
            .flatten()
            .is_some()
    }

    /// Remembers the store's answer: a refusal until `now + retry_after_ms` (an allowed answer
    /// remembers nothing).
    pub fn remember(&self, key: &str, now_ms: i64, rate_per_sec: f64, burst: u32, answer: Gcra) {
        if answer.allowed || answer.retry_after_ms == 0 {
            return;
        }
        let refused = Refused {
            rate_bits: rate_per_sec.to_bits(),
            burst,
            until_ms: now_ms.saturating_add(answer.retry_after_ms.min(i64::MAX as u64) as i64),
        };
        // At capacity the refusal is simply not remembered: the store answers next time.
        let _ = self.entries.upsert(key, || refused, |r| *r = refused);
    }

    /// Forgets `key`'s refusal (its limit was reset).
    pub fn forget(&self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops the refusals that ended.
    pub fn purge(&self, now_ms: i64) {
        self.entries.purge(now_ms, |r| r.until_ms > now_ms);
    }

    /// Requests answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// In-process limiter state, sharded by key.
pub struct LocalLimiter {
    cells: ShardedMap<Cell>,
}

impl LocalLimiter {
    pub fn new(max_entries: usize) -> Self {
        LocalLimiter {
            cells: ShardedMap::new(max_entries),
        }
    }

    /// Forgets every key (regression runs start each sample from nothing).
    pub fn clear(&self) {
        self.cells.clear();
    }

    fn with_cell<R>(
        &self,
        key: &str,
        now_ms: i64,
        init: Cell,
        f: impl FnOnce(&mut Cell) -> R,
    ) -> Result<R, StoreError> {
        self.cells
            .upsert(
                key,
                || init,
                |cell| {
                    if std::mem::discriminant(cell) != std::mem::discriminant(&init)
                        || cell.expired(now_ms)
                    {
                        *cell = init;
                    }
                    f(cell)
                },
            )
            .map_err(|AtCapacity(max)| {
                StoreError::Full(format!("limiter holds {max} keys (the configured maximum)"))
            })
    }
}

impl LimiterStore for LocalLimiter {
    fn gcra(
        &self,
        key: &str,
        now_ms: i64,
        rate_per_sec: f64,
        burst: u32,
    ) -> Result<Gcra, StoreError> {
        if !(rate_per_sec > 0.0 && rate_per_sec.is_finite()) || burst == 0 {
            return Err(StoreError::Invalid(
                "rate_limit needs a positive rate and a burst of at least 1".into(),
            ));
        }
        let now = now_ms as f64;
        let t = 1000.0 / rate_per_sec;
        let tau = t * burst as f64;
        self.with_cell(key, now_ms, Cell::Gcra { tat: now }, |cell| {
            let Cell::Gcra { tat } = cell else {
                unreachable!("initialised as GCRA")
            };
            let next = tat.max(now) + t;
            if next - now <= tau {
                *tat = next;
                Gcra {
                    allowed: true,
                    retry_after_ms: 0,
                }
            } else {
                Gcra {
                    allowed: false,
                    retry_after_ms: (next - tau - now).ceil().max(1.0) as u64,
                }
            }
        })
    }

    fn incr(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) -> Result<i64, StoreError> {
        if window_ms <= 0 {
            return Err(StoreError::Invalid(
                "counter windows must be positive".into(),
            ));
        }
        let aligned = now_ms.div_euclid(window_ms) * window_ms;
        let init = Cell::Window(StoredWindow {
            start: aligned,
            window: window_ms,
            cur: 0,
            prev: 0,
        });
        self.with_cell(key, now_ms, init, |cell| {
            let Cell::Window(w) = cell else {
                unreachable!("initialised as a window")
            };
            let StoredWindow {
                start,
                window,
                cur,
                prev,
            } = w;
            if *window != window_ms {
                *start = aligned;
                *window = window_ms;
                *cur = 0;
                *prev = 0;
            }
            if aligned > *start {
                *prev = if aligned - *start == window_ms {
                    *cur
                } else {
                    0
                };
                *cur = 0;
                *start = aligned;
            }
            *cur = cur.saturating_add(n);
            window_estimate(Some(*w), now_ms, window_ms)
        })
    }

    fn get(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<i64, StoreError> {
        if window_ms <= 0 {
            return Err(StoreError::Invalid(
                "counter windows must be positive".into(),
            ));
        }
        let stored = match self.cells.update(key, |c| *c) {
            Some(Cell::Window(w)) => Some(w),
            _ => None,
        };
        Ok(window_estimate(stored, now_ms, window_ms))
    }

    fn gcra_tat(&self, key: &str, now_ms: i64) -> Result<Option<f64>, StoreError> {
        Ok(self
            .cells
            .update(key, |c| match *c {
                Cell::Gcra { tat } if !c.expired(now_ms) => Some(tat),
                _ => None,
            })
            .flatten())
    }

    fn reset(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.cells.remove(key))
    }

    fn maintain(&self, now_ms: i64) {
        self.cells.purge(now_ms, |c| !c.expired(now_ms));
    }

    fn len(&self) -> usize {
        self.cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_view_says_what_the_limit_would_answer_without_spending() {
        let l = LocalLimiter::new(100);
        let (rate, burst) = (10.0, 3);
        assert_eq!(l.gcra_tat("k", 1_000).unwrap(), None);
        let idle = limit_view(None, 1_000, rate, burst);
        assert_eq!(
            (idle.remaining, idle.retry_after_ms, idle.full_in_ms),
            (3, 0, 0)
        );
        for left in (0..3).rev() {
            assert!(l.gcra("k", 1_000, rate, burst).unwrap().allowed);
            let v = limit_view(l.gcra_tat("k", 1_000).unwrap(), 1_000, rate, burst);
            assert_eq!(v.remaining, left);
        }
        // Looking spends nothing: the view still says 0 left, and the limit refuses with the
        // retry the view announced.
        let v = limit_view(l.gcra_tat("k", 1_000).unwrap(), 1_000, rate, burst);
        let refused = l.gcra("k", 1_000, rate, burst).unwrap();
        assert!(!refused.allowed);
        assert_eq!(v.retry_after_ms, refused.retry_after_ms);
        assert_eq!(v.full_in_ms, 300);
        // 100 ms later one more is allowed; 300 ms later the whole burst.
        assert_eq!(
            limit_view(l.gcra_tat("k", 1_100).unwrap(), 1_100, rate, burst).remaining,
            1
        );
        assert_eq!(l.gcra_tat("k", 1_301).unwrap(), None);
    }

    #[test]
    fn gcra_allows_the_burst_then_paces_at_the_rate() {
        let l = LocalLimiter::new(100);
        // 10/s with bursts of 3: three at once, then one every 100 ms.
        let t0 = 1_000_000;
        for _ in 0..3 {
            assert!(l.gcra("ip:1", t0, 10.0, 3).unwrap().allowed);
        }
        let refused = l.gcra("ip:1", t0, 10.0, 3).unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_ms, 100);
        assert!(!l.gcra("ip:1", t0 + 99, 10.0, 3).unwrap().allowed);
        assert!(l.gcra("ip:1", t0 + 100, 10.0, 3).unwrap().allowed);
        assert!(!l.gcra("ip:1", t0 + 150, 10.0, 3).unwrap().allowed);
        // Other keys are independent; an idle key recovers its whole burst.
        assert!(l.gcra("ip:2", t0, 10.0, 3).unwrap().allowed);
        for _ in 0..3 {
            assert!(l.gcra("ip:1", t0 + 10_000, 10.0, 3).unwrap().allowed);
        }
        assert!(l.gcra("x", t0, 0.0, 1).is_err());
    }

    #[test]
    fn gcra_over_a_long_run_admits_rate_times_time_plus_burst() {
        let l = LocalLimiter::new(100);
        let mut allowed = 0;
        // One attempt per ms for 10 s at 50/s, burst 5.
        for ms in 0..10_000 {
            if l.gcra("k", 5_000_000 + ms, 50.0, 5).unwrap().allowed {
                allowed += 1;
            }
        }
        assert!((500..=505).contains(&allowed), "{allowed}");
    }

    /// The cache answers exactly what the store would: every request a local GCRA refuses while
    /// a remembered refusal runs is one the cache refuses too, with the same `retry_after`, and
    /// the first request the store would allow again is asked of the store.
    #[test]
    fn remembered_refusals_answer_what_the_store_would() {
        let store = LocalLimiter::new(100);
        let cache = RefusalCache::new(100);
        let (rate, burst) = (10.0, 3);
        let mut asked = 0;
        for now in (0..3_000).step_by(7) {
            let cached = cache.check("k", now, rate, burst);
            let truth = store.gcra("k", now, rate, burst).unwrap();
            match cached {
                Some(c) => assert_eq!(c, truth, "at {now}"),
                None => {
                    asked += 1;
                    cache.remember("k", now, rate, burst, truth);
                }
            }
        }
        // 429 requests; the store was asked for the allowed ones and one refusal each time.
        assert!(asked < 80, "asked the store {asked} times");
        assert!(cache.hits() > 340);
        // Another limit on the same key is not answered from this one's refusal.
        let _ = store.gcra("k", 3_000, rate, burst);
        cache.remember(
            "k",
            3_000,
            rate,
            burst,
            Gcra {
                allowed: false,
                retry_after_ms: 50,
            },
        );
        assert!(cache.check("k", 3_010, rate, burst).is_some());
        assert!(cache.check("k", 3_010, 20.0, burst).is_none());
        assert!(cache.check("k", 3_010, rate, 4).is_none());
        assert!(cache.check("k", 3_050, rate, burst).is_none(), "ended");
        cache.purge(i64::MAX / 2);
        // Bounded: past its size a refusal is not remembered.
        let small = RefusalCache::new(1);
        let no = Gcra {
            allowed: false,
            retry_after_ms: 100,
        };
        small.remember("a", 0, rate, burst, no);
        small.remember("b", 0, rate, burst, no);
        assert!(small.check("a", 1, rate, burst).is_some());
        assert!(small.check("b", 1, rate, burst).is_none());
    }

    #[test]
    fn get_reads_without_creating() {
        let l = LocalLimiter::new(10);
        assert_eq!(l.get("k", 0, 1000).unwrap(), 0);
        assert_eq!(l.len(), 0);
        l.incr("k", 0, 1000, 5).unwrap();
        assert_eq!(l.get("k", 500, 1000).unwrap(), 5);
        assert_eq!(l.get("k", 1500, 1000).unwrap(), 3); // half of the previous window remains
        assert_eq!(l.get("k", 2500, 1000).unwrap(), 0);
        assert_eq!(l.incr("k", 1500, 1000, 0).unwrap(), 3);
    }

    #[test]
    fn sliding_window_counts() {
        let l = LocalLimiter::new(100);
        let w = 1000;
        let t0 = 10_000_000; // aligned
        for i in 0..10 {
            assert_eq!(l.incr("orders:u1", t0 + i, w, 1).unwrap(), i + 1);
        }
        // Halfway through the next window, half of the previous window still counts.
        assert_eq!(l.incr("orders:u1", t0 + 1500, w, 1).unwrap(), 5 + 1);
        // Two windows later everything has slid out.
        assert_eq!(l.incr("orders:u1", t0 + 3000, w, 1).unwrap(), 1);
    }

    #[test]
    fn the_store_is_bounded_and_purged() {
        let l = LocalLimiter::new(2);
        l.incr("a", 0, 100, 1).unwrap();
        l.gcra("b", 0, 1.0, 1).unwrap();
        assert!(l.incr("c", 0, 100, 1).is_err());
        l.maintain(10_000);
        assert!(l.is_empty());
        assert!(l.incr("c", 10_000, 100, 1).is_ok());
    }
}
