//! Nonce de-duplication: the [`NonceStore`] trait and its two in-process implementations.
//!
//! - [`BloomNonceStore`] — compact, constant memory, a designed false-positive rate (default 1e-6);
//!   see [`crate::replay::bloom`] for why it has no gap at the window edges.
//! - [`ExactNonceStore`] — no false positives; memory grows with the number of live nonces.
//!
//! Both keep a record of `(app, nonce)` until server time `ts − W + retention`, which is at least
//! `ts + W` — the last instant the window check accepts that timestamp — whenever
//! `retention ≥ 2·W`; the configuration refuses anything shorter.

use crate::replay::bloom::{BloomStats, Probe, SlicedBloom, SlicedBloomConfig};
use crate::store::ttl::TtlSet;
use crate::store::StoreError;

/// Smallest and largest accepted nonce length.
pub const NONCE_MIN_LEN: usize = 16;
pub const NONCE_MAX_LEN: usize = 64;

/// Checks the nonce format of contract v1: 16–64 characters of `[A-Za-z0-9_-]`.
pub fn validate_nonce(nonce: &str) -> Result<(), String> {
    let len = nonce.len();
    if !(NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&len) {
        return Err(format!(
            "x-nonce must be {NONCE_MIN_LEN}-{NONCE_MAX_LEN} characters long, got {len}"
        ));
    }
    if let Some(c) = nonce
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "x-nonce may only contain [A-Za-z0-9_-], found {c:?}"
        ));
    }
    Ok(())
}

/// What the store says about a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceVerdict {
    /// First sighting; now recorded.
    Fresh,
    /// Already recorded: a replay.
    Replay,
    /// The store cannot judge this timestamp (older than anything it still holds).
    OutOfRange,
}

/// Live figures of a nonce store, exported as metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NonceStats {
    pub mode: &'static str,
    pub memory_bytes: u64,
    pub entries: f64,
    pub fill_ratio: f64,
    pub estimated_fp: f64,
    pub overloaded: bool,
}

/// The nonce de-duplication step's state.
/// The fingerprint a request records after its nonce (see
/// [`NonceStore::check_and_insert_then`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Then {
    pub fingerprint: u128,
    /// How long the fingerprint is kept (the route's dedup window).
    pub window_ms: i64,
}

/// The nonce's verdict and, when it was asked, whether the fingerprint was new.
pub type Combined = (
    Result<NonceVerdict, StoreError>,
    Option<Result<bool, StoreError>>,
);

pub trait NonceStore: Send + Sync {
    /// Atomically records `(app, nonce)` for a request with timestamp `ts_ms`, which the caller has
    /// already checked against the app's window `window_ms` at server time `now_ms`.
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError>;

    /// [`check_and_insert`](Self::check_and_insert) and, only when the nonce is fresh, the
    /// duplicate-submission fingerprint `then` (as [`FingerprintStore::insert_if_absent`] would
    /// record it), in one step: for a shared store, one round trip instead of two. `None` when
    /// this store cannot (the engine then asks the fingerprint store after the nonce store). The
    /// second result is `None` when the nonce was not fresh (the fingerprint was not touched);
    /// when the step failed as a whole, both results are its error.
    ///
    /// [`FingerprintStore::insert_if_absent`]: crate::replay::fingerprint::FingerprintStore::insert_if_absent
    fn check_and_insert_then(
        &self,
        _app: &str,
        _nonce: &str,
        _ts_ms: i64,
        _window_ms: i64,
        _now_ms: i64,
        _then: Then,
    ) -> Option<Combined> {
        None
    }

    /// Whether this store can take [`check_and_insert_limits`](Self::check_and_insert_limits)
    /// (the engine plans the gateway and business tiers' counting calls only then).
    fn batches_limits(&self) -> bool {
        false
    }

    /// [`check_and_insert`](Self::check_and_insert), or
    /// [`check_and_insert_then`](Self::check_and_insert_then) with `then`, and, only when the
    /// nonce is fresh and the fingerprint (if any) new, the planned calls of `limits` in order (GCRA
    /// steps and distinct counts), stopping after the first limit that refuses: for a shared
    /// store, all in one round trip. The second result has the answers of the calls made (a
    /// prefix of `limits`; empty when the
    /// request was a replay or a duplicate, or when the store could not tell whether an earlier
    /// send of this call took them). `None` when this store cannot.
    #[allow(clippy::too_many_arguments)]
    fn check_and_insert_limits(
        &self,
        _app: &str,
        _nonce: &str,
        _ts_ms: i64,
        _window_ms: i64,
        _now_ms: i64,
        _then: Option<Then>,
        _limits: &[crate::store::limits::Planned],
    ) -> Option<(Combined, Vec<crate::store::limits::PlannedAnswer>)> {
        None
    }

    /// A hint that `(app, nonce)` with `ts_ms` will be checked soon: a store may bring the memory it
    /// will touch into cache. Must not read or write any record.
    fn prefetch(&self, _app: &str, _nonce: &str, _ts_ms: i64) {}

    /// Periodic housekeeping (rotation, purging). Never required for correctness.
    fn maintain(&self, now_ms: i64);

    fn stats(&self, now_ms: i64) -> NonceStats;
}

/// One store per app, so that one app's load cannot spend another's capacity: a signed flood of
/// one app fills its own filter (raising its own false-positive rate, nobody else's) or its own
/// exact store, never the others'. Each part is sized for its app (`[[apps]] expected_rps`,
/// `exact_max_entries`, `fingerprint_max_entries`). An app without a part is refused (the engine
/// never asks for one: unknown apps are refused before any store).
pub struct PerApp<S: ?Sized> {
    parts: Vec<(String, std::sync::Arc<S>)>,
    /// By app id, past a handful of apps (fewer are found by a scan).
    index: std::collections::HashMap<String, usize>,
}

impl<S: ?Sized> PerApp<S> {
    pub fn new(parts: Vec<(String, std::sync::Arc<S>)>) -> Self {
        let index = if parts.len() > 8 {
            parts
                .iter()
                .enumerate()
                .map(|(i, (app, _))| (app.clone(), i))
                .collect()
        } else {
            Default::default()
        };
        PerApp { parts, index }
    }

    /// The store of `app`.
    #[inline]
    pub fn part(&self, app: &str) -> Result<&S, StoreError> {
        let i = if self.index.is_empty() {
            self.parts.iter().position(|(a, _)| a == app)
        } else {
            self.index.get(app).copied()
        };
        match i {
            Some(i) => Ok(&*self.parts[i].1),
            None => Err(StoreError::Invalid(format!("no store for app {app:?}"))),
        }
    }

    /// Every app's store, in the order given.
    pub fn parts(&self) -> &[(String, std::sync::Arc<S>)] {
        &self.parts
    }
}

/// Nonce stores per app.
pub type PerAppNonces = PerApp<dyn NonceStore>;

impl NonceStore for PerAppNonces {
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError> {
        self.part(app)?
            .check_and_insert(app, nonce, ts_ms, window_ms, now_ms)
    }

    fn prefetch(&self, app: &str, nonce: &str, ts_ms: i64) {
        if let Ok(p) = self.part(app) {
            p.prefetch(app, nonce, ts_ms);
        }
    }

    fn maintain(&self, now_ms: i64) {
        for (_, s) in &self.parts {
            s.maintain(now_ms);
        }
    }

    /// The sum of the parts' memory and entries, and the worst part's fill, false-positive rate
    /// and overload (what an operator must act on).
    fn stats(&self, now_ms: i64) -> NonceStats {
        let mut out = NonceStats::default();
        for (_, s) in &self.parts {
            let st = s.stats(now_ms);
            out.mode = st.mode;
            out.memory_bytes += st.memory_bytes;
            out.entries += st.entries;
            out.fill_ratio = out.fill_ratio.max(st.fill_ratio);
            out.estimated_fp = out.estimated_fp.max(st.estimated_fp);
            out.overloaded |= st.overloaded;
        }
        out
    }
}

/// The compact mode: a [`SlicedBloom`] keyed by (app, nonce).
#[derive(Debug)]
pub struct BloomNonceStore {
    filter: SlicedBloom,
}

impl BloomNonceStore {
    pub fn new(cfg: SlicedBloomConfig, seed: u64) -> Self {
        BloomNonceStore {
            filter: SlicedBloom::new(cfg, seed),
        }
    }

    pub fn filter(&self) -> &SlicedBloom {
        &self.filter
    }

    pub fn bloom_stats(&self, now_ms: i64) -> BloomStats {
        self.filter.stats(now_ms)
    }

    /// A store whose filter is `filter` (e.g. read back from a snapshot).
    pub fn from_filter(filter: SlicedBloom) -> Self {
        BloomNonceStore { filter }
    }
}

fn app_scope(app: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(app.as_bytes())
}

impl NonceStore for BloomNonceStore {
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        _window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError> {
        let h = self.filter.hash(app_scope(app), nonce.as_bytes());
        Ok(match self.filter.check_and_insert(h, ts_ms, now_ms) {
            Probe::New => NonceVerdict::Fresh,
            Probe::Seen => NonceVerdict::Replay,
            Probe::OutOfRange => NonceVerdict::OutOfRange,
        })
    }

    fn prefetch(&self, app: &str, nonce: &str, ts_ms: i64) {
        self.filter
            .prefetch(self.filter.hash(app_scope(app), nonce.as_bytes()), ts_ms);
    }

    fn maintain(&self, now_ms: i64) {
        self.filter.maintain(now_ms);
    }

    fn stats(&self, now_ms: i64) -> NonceStats {
        let s = self.filter.stats(now_ms);
        NonceStats {
            mode: "bloom",
            memory_bytes: s.memory_bytes,
            entries: s.estimated_entries,
            fill_ratio: s.fill_ratio,
            estimated_fp: s.estimated_fp,
            overloaded: s.overloaded,
        }
    }
}

/// The exact mode: every live (app, nonce) kept verbatim until its record expires.
pub struct ExactNonceStore {
    set: TtlSet<Box<[u8]>>,
    retention_ms: i64,
}

impl ExactNonceStore {
    pub fn new(retention_ms: i64, max_entries: usize) -> Self {
        ExactNonceStore {
            set: TtlSet::new(max_entries),
            retention_ms,
        }
    }
}

impl ExactNonceStore {
    /// The live records (`app ‖ 0 ‖ nonce`) and their expiries (for a snapshot across a restart).
    pub fn live_entries(&self, now_ms: i64) -> Vec<(Box<[u8]>, i64)> {
        self.set.live_entries(now_ms)
    }

    /// Puts back a snapshot's records; how many were still live.
    pub fn restore(&self, entries: Vec<(Box<[u8]>, i64)>, now_ms: i64) -> usize {
        self.set.restore(entries, now_ms)
    }
}

impl NonceStore for ExactNonceStore {
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError> {
        let mut key = Vec::with_capacity(app.len() + 1 + nonce.len());
        key.extend_from_slice(app.as_bytes());
        key.push(0);
        key.extend_from_slice(nonce.as_bytes());
        // Live while `now < expires`, so `+ 1` keeps the record at `now = ts + W` itself (the window
        // check accepts |now − ts| ≤ W, both edges included).
        let expires = ts_ms
            .saturating_sub(window_ms)
            .saturating_add(self.retention_ms)
            .saturating_add(1);
        match self
            .set
            .insert_unless_purged(key.into_boxed_slice(), now_ms, expires)
        {
            Ok(Some(true)) => Ok(NonceVerdict::Fresh),
            Ok(Some(false)) => Ok(NonceVerdict::Replay),
            // The clock reading predates a purge that may have dropped this nonce's record: by
            // the store's own time the timestamp is past the window.
            Ok(None) => Ok(NonceVerdict::OutOfRange),
            Err(full) => Err(StoreError::Full(full.to_string())),
        }
    }

    fn maintain(&self, now_ms: i64) {
        self.set.purge(now_ms);
    }

    fn stats(&self, _now_ms: i64) -> NonceStats {
        let n = self.set.len();
        NonceStats {
            mode: "exact",
            // Key bytes + hash map overhead, roughly; exact mode has no fixed size.
            memory_bytes: (n as u64) * 96,
            entries: n as f64,
            fill_ratio: 0.0,
            estimated_fp: 0.0,
            overloaded: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_format() {
        assert!(validate_nonce("n0nce-0123456789AB").is_ok());
        assert!(validate_nonce(&"a".repeat(16)).is_ok());
        assert!(validate_nonce(&"a".repeat(64)).is_ok());
        assert!(validate_nonce(&"a".repeat(15)).is_err());
        assert!(validate_nonce(&"a".repeat(65)).is_err());
        assert!(validate_nonce("n0nce 0123456789AB").is_err());
        assert!(validate_nonce("n0nce\n0123456789AB").is_err());
        assert!(validate_nonce("nönce-0123456789AB").is_err());
    }

    /// A check whose clock reading predates a purge that dropped the nonce's record (its thread
    /// stalled between reading the clock and taking the shard's lock) is out of range, never a
    /// first sighting. Before the store kept each shard's purge time, the replay below was
    /// `Fresh`: at `now = ts + W` it still passes the window step.
    #[test]
    fn exact_store_never_takes_a_purged_record_for_a_first_sighting() {
        let s = ExactNonceStore::new(2_000, 100);
        let (ts, w) = (10_000, 1_000);
        assert_eq!(
            s.check_and_insert("a", "n", ts, w, ts),
            Ok(NonceVerdict::Fresh)
        );
        // The record lives until ts + W + 1; another thread's purge runs a little later.
        s.maintain(ts + w + 5);
        assert_eq!(
            s.check_and_insert("a", "n", ts, w, ts + w),
            Ok(NonceVerdict::OutOfRange)
        );
        // A nonce whose record the purge could not have dropped is judged as ever.
        assert_eq!(
            s.check_and_insert("a", "m", ts + 10, w, ts + w),
            Ok(NonceVerdict::Fresh)
        );
        assert_eq!(
            s.check_and_insert("a", "m", ts + 10, w, ts + w),
            Ok(NonceVerdict::Replay)
        );
    }

    #[test]
    fn exact_store_keeps_until_ts_plus_window() {
        let s = ExactNonceStore::new(2_000, 100);
        let (ts, w) = (10_000, 1_000);
        assert_eq!(
            s.check_and_insert("a", "n", ts, w, ts - w),
            Ok(NonceVerdict::Fresh)
        );
        assert_eq!(
            s.check_and_insert("b", "n", ts, w, ts - w),
            Ok(NonceVerdict::Fresh),
            "nonces are scoped per app"
        );
        s.maintain(ts + w);
        assert_eq!(
            s.check_and_insert("a", "n", ts, w, ts + w),
            Ok(NonceVerdict::Replay)
        );
    }
}
