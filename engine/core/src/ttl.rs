//! An exact, sharded set of keys with per-key expiry: the in-process store behind exact nonce mode
//! and duplicate-submission fingerprints. Insert-if-absent is atomic per key (one shard mutex), so
//! of N racing inserts of one key exactly one succeeds. Memory grows with the number of live keys,
//! bounded by `max_entries` (past it, inserts fail with [`Full`] and the caller's failure policy
//! applies), and expired keys are dropped by `purge`.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

/// The set is at its configured size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("store is full ({0} live entries)")]
pub struct Full(pub usize);

pub struct TtlSet<K> {
    shards: Box<[Mutex<HashMap<K, i64>>]>,
    hasher: std::collections::hash_map::RandomState,
    len: AtomicUsize,
    max_entries: usize,
    last_purge: PurgeGate,
}

/// `purge` scans every entry under each shard's lock; doing it at most this often keeps the scan
/// off the decision path's back (expired entries are ignored by lookups anyway).
pub(crate) const PURGE_EVERY_MS: i64 = 1000;

/// Lets one caller through at most once per [`PURGE_EVERY_MS`].
#[derive(Debug)]
pub(crate) struct PurgeGate(AtomicI64);

impl PurgeGate {
    pub(crate) fn new() -> Self {
        PurgeGate(AtomicI64::new(i64::MIN))
    }

    /// True for the one caller that should purge now.
    pub(crate) fn due(&self, now_ms: i64) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= PURGE_EVERY_MS
            && self
                .0
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

impl<K: Hash + Eq> TtlSet<K> {
    pub fn new(max_entries: usize) -> Self {
        TtlSet {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            len: AtomicUsize::new(0),
            max_entries,
            last_purge: PurgeGate::new(),
        }
    }

    fn shard(&self, key: &K) -> &Mutex<HashMap<K, i64>> {
        let h = self.hasher.hash_one(key);
        &self.shards[(h as usize) % SHARDS]
    }

    /// Inserts `key` with expiry `expires_at_ms` unless a live entry exists. Returns `Ok(true)` when
    /// inserted (first sighting), `Ok(false)` when a live entry was present.
    pub fn insert_if_absent(&self, key: K, now_ms: i64, expires_at_ms: i64) -> Result<bool, Full> {
        let mut map = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(exp) = map.get_mut(&key) {
            if *exp > now_ms {
                return Ok(false);
            }
            *exp = expires_at_ms;
            return Ok(true);
        }
        let len = self.len.load(Ordering::Relaxed);
        if len >= self.max_entries {
            return Err(Full(len));
        }
        map.insert(key, expires_at_ms);
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    pub fn contains(&self, key: &K, now_ms: i64) -> bool {
        let map = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).is_some_and(|exp| *exp > now_ms)
    }

    /// Drops expired entries, at most once per second (see [`PURGE_EVERY_MS`]).
    pub fn purge(&self, now_ms: i64) {
        if !self.last_purge.due(now_ms) {
            return;
        }
        for shard in self.shards.iter() {
            let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
            let before = map.len();
            map.retain(|_, exp| *exp > now_ms);
            self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_expire_purge_and_limit() {
        let s = TtlSet::new(2);
        assert_eq!(s.insert_if_absent(1u64, 0, 10), Ok(true));
        assert_eq!(s.insert_if_absent(1u64, 9, 19), Ok(false));
        assert_eq!(
            s.insert_if_absent(1u64, 10, 20),
            Ok(true),
            "expired key re-inserts"
        );
        assert_eq!(s.insert_if_absent(2u64, 10, 20), Ok(true));
        assert_eq!(s.insert_if_absent(3u64, 10, 20), Err(Full(2)));
        s.purge(20);
        assert!(s.is_empty());
        assert_eq!(s.insert_if_absent(3u64, 20, 30), Ok(true));
    }
}
