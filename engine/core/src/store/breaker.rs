//! Circuit breakers per route, fed by the outcomes callers report (`POST /v1/outcome`), in the
//! manner of Sentinel's degrade rules:
//!
//! - **Closed**: requests pass; outcomes are counted in a sliding statistics window (current and
//!   previous fixed windows, the previous weighted by its overlap). When at least `min_requests`
//!   outcomes are in the window and the error ratio (status ≥ 500) reaches `error_ratio`, or the
//!   slow-call ratio (latency ≥ `slow_ms`) reaches `slow_ratio`, the breaker opens.
//! - **Open** for `open_ms`: every request is refused (`CIRCUIT_OPEN`).
//! - **Half-open**: one probe request passes; its reported outcome closes the breaker (and clears
//!   the statistics) or opens it again. A probe whose outcome never arrives is replaced after
//!   `open_ms`.
//!
//! The breaker of a route is created by the first rule that asks about it; outcomes for routes no
//! rule watches are ignored, so callers can report every response without growing state. A rule
//! may watch paths a client chooses, so the map is bounded (`[rules] max_breakers`): when it is
//! full, breakers that remember nothing (closed, no outcome in their window: the same as a new
//! one) are dropped, and if every one still remembers something, a new route gets no breaker
//! (its requests pass) until some do.

use std::collections::HashMap;
use std::sync::Mutex;

/// A breaker's thresholds, given by the rule that watches the route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    pub window_ms: i64,
    pub min_requests: u64,
    pub error_ratio: f64,
    pub slow_ms: u64,
    pub slow_ratio: f64,
    pub open_ms: i64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window_ms: 10_000,
            min_requests: 20,
            error_ratio: 0.5,
            slow_ms: 1_000,
            slow_ratio: 1.1, // > 1: slow calls alone never open it unless configured
            open_ms: 5_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum State {
    Closed,
    Open { until: i64 },
    HalfOpen { probe_since: i64 },
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    total: u64,
    errors: u64,
    slow: u64,
}

#[derive(Debug)]
struct Breaker {
    cfg: BreakerConfig,
    state: State,
    start: i64,
    cur: Counts,
    prev: Counts,
}

impl Breaker {
    fn new(cfg: BreakerConfig, now: i64) -> Breaker {
        Breaker {
            cfg,
            state: State::Closed,
            start: now.div_euclid(cfg.window_ms.max(1)) * cfg.window_ms.max(1),
            cur: Counts::default(),
            prev: Counts::default(),
        }
    }

    fn roll(&mut self, now: i64) {
        let w = self.cfg.window_ms.max(1);
        let aligned = now.div_euclid(w) * w;
        if aligned > self.start {
            self.prev = if aligned - self.start == w {
                self.cur
            } else {
                Counts::default()
            };
            self.cur = Counts::default();
            self.start = aligned;
        }
    }

    /// (total, errors, slow) over the sliding window.
    fn window(&self, now: i64) -> (f64, f64, f64) {
        let w = self.cfg.window_ms.max(1) as f64;
        let keep = 1.0 - ((now - self.start) as f64 / w).clamp(0.0, 1.0);
        (
            self.prev.total as f64 * keep + self.cur.total as f64,
            self.prev.errors as f64 * keep + self.cur.errors as f64,
            self.prev.slow as f64 * keep + self.cur.slow as f64,
        )
    }
}

/// In-process breakers, keyed by `app` + route.
#[derive(Debug)]
pub struct LocalBreakers {
    map: Mutex<HashMap<String, Breaker>>,
    max: usize,
}

/// Breakers kept unless the configuration says otherwise.
pub const DEFAULT_MAX_BREAKERS: usize = 10_000;

impl Default for LocalBreakers {
    fn default() -> Self {
        Self::with_max(DEFAULT_MAX_BREAKERS)
    }
}

impl Breaker {
    /// Whether it holds nothing a new breaker would not (closed, no outcome in its window).
    fn blank(&mut self, now: i64) -> bool {
        self.roll(now);
        self.state == State::Closed && self.cur.total == 0 && self.prev.total == 0
    }
}

/// A breaker as [`LocalBreakers::list`] shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerView {
    pub key: String,
    pub state: State,
    pub requests: f64,
    pub errors: f64,
    pub slow: f64,
    pub cfg: BreakerConfig,
}

/// The key of a route's breaker.
pub fn breaker_key(app: &str, route: &str) -> String {
    format!("{app}\u{0}{route}")
}

impl LocalBreakers {
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max` breakers (at least 1).
    pub fn with_max(max: usize) -> Self {
        LocalBreakers {
            map: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    /// Forgets every breaker.
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Whether a request to the route may pass now (creating the breaker on first use).
    pub fn allow(&self, key: &str, now: i64, cfg: BreakerConfig) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.max && !map.contains_key(key) {
            map.retain(|_, b| !b.blank(now));
            if map.len() >= self.max {
                return true;
            }
        }
        let b = map
            .entry(key.to_string())
            .or_insert_with(|| Breaker::new(cfg, now));
        b.cfg = cfg;
        b.roll(now);
        match b.state {
            State::Closed => {
                let (total, errors, slow) = b.window(now);
                let tripped = total >= cfg.min_requests as f64
                    && total > 0.0
                    && (errors / total >= cfg.error_ratio || slow / total >= cfg.slow_ratio);
                if tripped {
                    b.state = State::Open {
                        until: now + cfg.open_ms,
                    };
                    false
                } else {
                    true
                }
            }
            State::Open { until } if now >= until => {
                b.state = State::HalfOpen { probe_since: now };
                true
            }
            State::Open { .. } => false,
            State::HalfOpen { probe_since } if now - probe_since >= cfg.open_ms => {
                b.state = State::HalfOpen { probe_since: now };
                true
            }
            State::HalfOpen { .. } => false,
        }
    }

    /// Records a downstream outcome for the route; ignored when no rule watches it.
    pub fn record(&self, key: &str, now: i64, status: u16, latency_ms: u64) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(b) = map.get_mut(key) else { return };
        b.roll(now);
        let error = status >= 500;
        let slow = latency_ms >= b.cfg.slow_ms;
        if let State::HalfOpen { .. } = b.state {
            if error || slow {
                b.state = State::Open {
                    until: now + b.cfg.open_ms,
                };
            } else {
                b.state = State::Closed;
                b.cur = Counts::default();
                b.prev = Counts::default();
            }
            return;
        }
        b.cur.total += 1;
        b.cur.errors += error as u64;
        b.cur.slow += slow as u64;
    }

    /// An operator's repair: closes the route's breaker (its counts start afresh), or opens it
    /// until `open_until` (requests refused, then a probe as after a trip). A breaker this
    /// instance has not met yet is created open; closing one it does not hold does nothing.
    /// Whether a breaker was there.
    pub fn force(&self, key: &str, now: i64, open_until: Option<i64>) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let had = map.contains_key(key);
        match open_until {
            None => {
                if let Some(b) = map.get_mut(key) {
                    b.roll(now);
                    b.state = State::Closed;
                    b.cur = Counts::default();
                    b.prev = Counts::default();
                }
            }
            Some(until) => {
                if !had && map.len() >= self.max {
                    map.retain(|_, b| !b.blank(now));
                }
                // The rule's thresholds replace the defaults at its next request.
                let b = map
                    .entry(key.to_string())
                    .or_insert_with(|| Breaker::new(BreakerConfig::default(), now));
                b.state = State::Open { until };
            }
        }
        had
    }

    /// Every breaker this instance holds, by key: its state and its window's counts
    /// (requests, errors, slow calls; the previous window weighted as in the trip decision).
    pub fn list(&self, now: i64) -> Vec<BreakerView> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<BreakerView> = map
            .iter_mut()
            .map(|(k, b)| {
                b.roll(now);
                let (requests, errors, slow) = b.window(now);
                BreakerView {
                    key: k.clone(),
                    state: b.state,
                    requests,
                    errors,
                    slow,
                    cfg: b.cfg,
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    pub fn state(&self, key: &str) -> Option<State> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).map(|b| b.state)
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator closes a tripped breaker (counts start afresh) or opens one until a time;
    /// the list shows what the trip decision sees.
    #[test]
    fn a_forced_breaker_obeys_until_it_is_released() {
        let b = LocalBreakers::with_max(10);
        let k = breaker_key("shop", "/api/pay");
        let c = cfg();
        assert!(b.allow(&k, 1_000, c));
        for _ in 0..c.min_requests {
            b.record(&k, 1_001, 500, 1);
        }
        assert!(!b.allow(&k, 1_002, c), "tripped");
        let v = b.list(1_002);
        assert_eq!(
            (v.len(), v[0].requests, v[0].errors),
            (1, c.min_requests as f64, c.min_requests as f64)
        );
        assert!(b.force(&k, 1_003, None));
        assert!(b.allow(&k, 1_004, c), "closed by hand");
        assert_eq!(b.list(1_004)[0].requests, 0.0, "counts start afresh");
        // Opened until t = 50_000: refused before, a probe after.
        b.force(&k, 1_005, Some(50_000));
        assert!(!b.allow(&k, 49_999, c));
        assert!(b.allow(&k, 50_000, c));
        // A breaker never met here is created open; closing an unknown one does nothing.
        let other = breaker_key("shop", "/api/other");
        assert!(!b.force(&other, 1_000, Some(i64::MAX)));
        assert!(!b.allow(&other, 2_000, c));
        assert!(!b.force(&breaker_key("x", "/y"), 1_000, None));
        assert_eq!(b.len(), 2);
    }

    /// A rule that watches every path: a client sending distinct paths used to add a breaker per
    /// path for good. The map stays at its bound, and a breaker that remembers failures is kept.
    #[test]
    fn distinct_paths_leave_the_breakers_at_their_bound() {
        let b = LocalBreakers::with_max(100);
        let k = breaker_key("shop", "/api/pay");
        let c = cfg();
        for i in 0..c.min_requests {
            assert!(b.allow(&k, 1_000 + i as i64, c));
            b.record(&k, 1_000 + i as i64, 503, 1);
        }
        assert!(!b.allow(&k, 1_100, c), "ten failures open it");
        for i in 0..10_000 {
            b.allow(&breaker_key("shop", &format!("/x/{i}")), 1_200, c);
            assert!(b.len() <= 100);
        }
        assert!(
            !b.allow(&k, 1_300, c),
            "the failing route's breaker is still open"
        );
        // Once the window has passed, the blank ones make room again.
        assert!(b.allow(&breaker_key("shop", "/new"), 100_000, c));
        assert!(b.state(&breaker_key("shop", "/new")).is_some());
    }

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            window_ms: 10_000,
            min_requests: 10,
            error_ratio: 0.5,
            slow_ms: 500,
            slow_ratio: 0.8,
            open_ms: 2_000,
        }
    }

    #[test]
    fn error_ratio_opens_then_half_open_probe_closes_or_reopens() {
        let b = LocalBreakers::new();
        let k = breaker_key("shop", "/api/pay");
        let t = 1_000_000;
        assert!(b.allow(&k, t, cfg()));
        // 9 outcomes, all errors: below min_requests, still closed.
        for _ in 0..9 {
            b.record(&k, t, 502, 10);
        }
        assert!(b.allow(&k, t, cfg()));
        b.record(&k, t, 200, 10);
        // 10 outcomes, 90% errors: opens.
        assert!(!b.allow(&k, t + 1, cfg()));
        assert!(matches!(b.state(&k), Some(State::Open { .. })));
        assert!(!b.allow(&k, t + 1_999, cfg()));
        // After open_ms: exactly one probe.
        assert!(b.allow(&k, t + 2_001, cfg()));
        assert!(!b.allow(&k, t + 2_002, cfg()));
        // The probe fails: open again.
        b.record(&k, t + 2_003, 503, 10);
        assert!(!b.allow(&k, t + 2_004, cfg()));
        // Next probe succeeds: closed, statistics cleared.
        assert!(b.allow(&k, t + 4_010, cfg()));
        b.record(&k, t + 4_011, 200, 10);
        assert_eq!(b.state(&k), Some(State::Closed));
        assert!(b.allow(&k, t + 4_012, cfg()));
    }

    #[test]
    fn slow_calls_open_it_too_and_unwatched_routes_are_ignored() {
        let b = LocalBreakers::new();
        let k = breaker_key("shop", "/api/slow");
        let t = 2_000_000;
        assert!(b.allow(&k, t, cfg()));
        for _ in 0..10 {
            b.record(&k, t, 200, 900);
        }
        assert!(!b.allow(&k, t, cfg()));
        b.record(&breaker_key("shop", "/nobody/watches"), t, 500, 1);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn a_lost_probe_is_replaced() {
        let b = LocalBreakers::new();
        let k = breaker_key("a", "/r");
        let t = 3_000_000;
        b.allow(&k, t, cfg());
        for _ in 0..10 {
            b.record(&k, t, 500, 1);
        }
        assert!(!b.allow(&k, t, cfg()));
        assert!(b.allow(&k, t + 2_000, cfg()), "probe");
        assert!(!b.allow(&k, t + 2_500, cfg()));
        assert!(
            b.allow(&k, t + 4_000, cfg()),
            "the probe's outcome never came: a new probe"
        );
    }
}
