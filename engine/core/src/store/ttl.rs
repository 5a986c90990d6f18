//! An exact, sharded set of keys with per-key expiry: the in-process store behind exact nonce mode
//! and duplicate-submission fingerprints. Insert-if-absent is atomic per key (one shard mutex), so
//! of N racing inserts of one key exactly one succeeds. Memory grows with the number of live keys,
//! bounded by `max_entries` (past it, inserts fail with [`Full`] and the caller's failure policy
//! applies), and expired keys are dropped by `purge`.
//!
//! Kept here rather than taken from a cache crate: a cache evicts live entries when full, which
//! would forget a nonce and let its replay through; this set fails closed and never evicts.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use super::purge::{shard_indices, shard_of, PurgeGate};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

/// The set is at its configured size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("store is full ({0} live entries)")]
pub struct Full(pub usize);

/// One shard: its entries and the latest `now_ms` it was purged at.
struct ShardState<K> {
    table: HashTable<(K, i64)>,
    /// Entries expiring at or before this may have been dropped (`i64::MIN`: never purged).
    purged_to: i64,
}

type Shard<K> = Mutex<ShardState<K>>;

pub struct TtlSet<K> {
    /// (key, expiry in Unix ms) per shard.
    shards: Box<[Shard<K>]>,
    hasher: std::collections::hash_map::RandomState,
    len: AtomicUsize,
    max_entries: usize,
    last_purge: PurgeGate,
}

impl<K: Hash + Eq> TtlSet<K> {
    pub fn new(max_entries: usize) -> Self {
        TtlSet {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(ShardState {
                        table: HashTable::new(),
                        purged_to: i64::MIN,
                    })
                })
                .collect(),
            hasher: Default::default(),
            len: AtomicUsize::new(0),
            max_entries,
            last_purge: PurgeGate::new(),
        }
    }

    /// `key`'s hash and its shard: one hash for the shard and the slot in its table.
    fn shard(&self, key: &K) -> (u64, &Shard<K>) {
        let h = self.hasher.hash_one(key);
        (h, &self.shards[shard_of(h, SHARDS)])
    }

    /// Inserts `key` with expiry `expires_at_ms` unless a live entry exists. Returns `Ok(true)` when
    /// inserted (first sighting), `Ok(false)` when a live entry was present. Also `Ok(true)`, with
    /// nothing inserted, when the entry would already be past its shard's last purge (see
    /// [`insert_unless_purged`](Self::insert_unless_purged)): a late fingerprint is new.
    pub fn insert_if_absent(&self, key: K, now_ms: i64, expires_at_ms: i64) -> Result<bool, Full> {
        Ok(self
            .insert_unless_purged(key, now_ms, expires_at_ms)?
            .unwrap_or(true))
    }

    /// [`insert_if_absent`](Self::insert_if_absent), except that it answers `Ok(None)` (and
    /// inserts nothing) when `key` is absent but an entry for it with this expiry could already
    /// have been purged: its shard was purged at a time at or past `expires_at_ms`. That happens
    /// when the caller's clock reading is older than the purge (a thread stalled between reading
    /// the clock and taking the shard's lock): "absent" then cannot tell a first sighting from a
    /// record that expired and was dropped meanwhile. Decided under the shard's lock, as the
    /// purge is, so it is exact.
    pub fn insert_unless_purged(
        &self,
        key: K,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<Option<bool>, Full> {
        let (hash, shard) = self.shard(&key);
        let mut state = shard.lock().unwrap_or_else(|e| e.into_inner());
        let purged_to = state.purged_to;
        if let Some((_, exp)) = state.table.find_mut(hash, |(k, _)| *k == key) {
            if *exp > now_ms {
                return Ok(Some(false));
            }
            *exp = expires_at_ms;
            return Ok(Some(true));
        }
        if expires_at_ms <= purged_to {
            return Ok(None);
        }
        let len = self.len.load(Ordering::Relaxed);
        if len >= self.max_entries {
            return Err(Full(len));
        }
        state
            .table
            .insert_unique(hash, (key, expires_at_ms), |(k, _)| self.hasher.hash_one(k));
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(Some(true))
    }

    pub fn contains(&self, key: &K, now_ms: i64) -> bool {
        let (hash, shard) = self.shard(key);
        let state = shard.lock().unwrap_or_else(|e| e.into_inner());
        state
            .table
            .find(hash, |(k, _)| k == key)
            .is_some_and(|(_, exp)| *exp > now_ms)
    }

    /// Drops expired entries: every shard about once per second (see [`PURGE_EVERY_MS`]), a few
    /// shards per call.
    pub fn purge(&self, now_ms: i64) {
        let due = self.last_purge.due(now_ms, self.shards.len());
        for i in shard_indices(due, self.shards.len()) {
            let mut state = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
            let before = state.table.len();
            state.table.retain(|(_, exp)| *exp > now_ms);
            state.purged_to = state.purged_to.max(now_ms);
            self.len
                .fetch_sub(before - state.table.len(), Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry still live at `now_ms`, with its expiry (for a snapshot).
    pub fn live_entries(&self, now_ms: i64) -> Vec<(K, i64)>
    where
        K: Clone,
    {
        let mut out = Vec::with_capacity(self.len());
        for shard in self.shards.iter() {
            let state = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(state.table.iter().filter(|(_, exp)| *exp > now_ms).cloned());
        }
        out
    }

    /// Puts back entries of a snapshot (those still live at `now_ms`); stops at the size limit.
    pub fn restore(&self, entries: impl IntoIterator<Item = (K, i64)>, now_ms: i64) -> usize {
        let mut n = 0;
        for (k, exp) in entries {
            if exp > now_ms {
                match self.insert_if_absent(k, now_ms, exp) {
                    Ok(true) => n += 1,
                    Ok(false) => {}
                    Err(_) => break,
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_are_spread_over_the_interval() {
        let g = PurgeGate::new();
        assert_eq!(g.due(0, 64), 0..64, "the first call is a whole pass");
        assert!(g.due(10, 64).is_empty(), "nothing due yet");
        // Ticks of 50 ms: a few shards each, round-robin, one pass per second in all.
        let mut seen = Vec::new();
        for t in (50..=1_000).step_by(50) {
            let due = g.due(t, 64);
            assert!(due.len() <= 4, "{t}: {due:?}");
            seen.extend(shard_indices(due, 64));
        }
        assert!((60..=64).contains(&seen.len()), "{}", seen.len());
        seen.dedup();
        assert!(
            seen.windows(2).all(|w| w[1] == (w[0] + 1) % 64),
            "round-robin: {seen:?}"
        );
        // After a long pause, a whole pass again.
        assert_eq!(g.due(10_000, 64).len(), 64);
    }

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
