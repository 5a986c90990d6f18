//! A bounded map from string keys to per-key state, sharded over mutexes: the in-process layout
//! of the limiter and distinct-count stores. Each key's update runs under its shard's lock, so it
//! is atomic per key; the number of keys is capped (past it, new keys are refused and the caller's
//! failure policy applies); expired state is purged at most once per [`PURGE_EVERY_MS`].

use std::hash::BuildHasher;

use hashbrown::HashTable;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

#[cfg(doc)]
use super::purge::PURGE_EVERY_MS;
use super::purge::{shard_indices, shard_of, PurgeGate};

const SHARDS: usize = 64;

type Table<V> = HashTable<(Box<str>, V)>;
type Shard<V> = Mutex<Table<V>>;

pub(crate) struct ShardedMap<V> {
    shards: Box<[Shard<V>]>,
    hasher: std::collections::hash_map::RandomState,
    len: AtomicUsize,
    max_entries: usize,
    last_purge: PurgeGate,
}

/// The map holds its maximum number of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtCapacity(pub usize);

impl<V> ShardedMap<V> {
    pub(crate) fn new(max_entries: usize) -> Self {
        ShardedMap {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            hasher: Default::default(),
            len: AtomicUsize::new(0),
            max_entries,
            last_purge: PurgeGate::new(),
        }
    }

    /// `key`'s hash (SipHash with this map's random keys: keys come from requests) and its
    /// shard, locked. The one hash serves the shard and the slot in its table.
    fn shard(&self, key: &str) -> (u64, MutexGuard<'_, Table<V>>) {
        let hash = self.hasher.hash_one(key);
        let shard = self.shards[shard_of(hash, SHARDS)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (hash, shard)
    }

    /// Runs `f` on `key`'s state, creating it with `create` when absent (unless at capacity).
    pub(crate) fn upsert<R>(
        &self,
        key: &str,
        create: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<R, AtCapacity> {
        let (hash, mut table) = self.shard(key);
        if let Some((_, v)) = table.find_mut(hash, |(k, _)| **k == *key) {
            return Ok(f(v));
        }
        if self.len.load(Ordering::Relaxed) >= self.max_entries {
            return Err(AtCapacity(self.max_entries));
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        let entry = table.insert_unique(hash, (key.into(), create()), |(k, _)| {
            self.hasher.hash_one(&**k)
        });
        Ok(f(&mut entry.into_mut().1))
    }

    /// Runs `f` on `key`'s state if it exists, creating nothing.
    pub(crate) fn update<R>(&self, key: &str, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let (hash, mut table) = self.shard(key);
        table
            .find_mut(hash, |(k, _)| **k == *key)
            .map(|(_, v)| f(v))
    }

    /// Forgets `key`; whether it was there.
    pub(crate) fn remove(&self, key: &str) -> bool {
        let (hash, mut table) = self.shard(key);
        match table.find_entry(hash, |(k, _)| **k == *key) {
            Ok(entry) => {
                entry.remove();
                self.len.fetch_sub(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Drops the entries `keep` rejects: every shard about once per purge interval, a few shards
    /// per call.
    pub(crate) fn purge(&self, now_ms: i64, mut keep: impl FnMut(&V) -> bool) {
        let due = self.last_purge.due(now_ms, SHARDS);
        for i in shard_indices(due, SHARDS) {
            let mut map = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
            let before = map.len();
            map.retain(|(_, v)| keep(v));
            self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
        }
    }

    /// Forgets every key.
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.len.store(0, Ordering::Relaxed);
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shard comes from bits the tables do not use for the slot (low bits) or the control
    /// byte (top 7 bits): the keys of one shard still spread over its whole table.
    #[test]
    fn the_shard_uses_bits_the_table_does_not() {
        for h in [0u64, 0x0123_4567_89ab_cdef, u64::MAX] {
            let slot_and_control = 0xffff_ffff | (0x7f << 57);
            assert_eq!(shard_of(h, SHARDS), shard_of(h ^ slot_and_control, SHARDS));
        }
        let used: std::collections::HashSet<usize> =
            (0..4096u64).map(|i| shard_of(i << 40, SHARDS)).collect();
        assert_eq!(used.len(), SHARDS);
    }

    #[test]
    fn keys_are_counted_capped_updated_and_purged() {
        let m: ShardedMap<i64> = ShardedMap::new(1000);
        for i in 0..1000 {
            assert_eq!(m.upsert(&format!("k{i}"), || i, |v| *v), Ok(i));
        }
        assert_eq!(m.upsert("k-new", || 0, |v| *v), Err(AtCapacity(1000)));
        assert_eq!(m.upsert("k7", || 0, |v| std::mem::replace(v, 70)), Ok(7));
        assert_eq!(m.update("k7", |v| *v), Some(70));
        assert_eq!(m.update("absent", |v| *v), None);
        assert_eq!(m.len(), 1000);
        // Odd values go; k7 now holds 70 and stays.
        m.purge(i64::MAX / 2, |v| v % 2 == 0);
        assert_eq!(m.len(), 501);
        assert_eq!(m.update("k3", |v| *v), None);
        assert_eq!(m.update("k4", |v| *v), Some(4));
        m.clear();
        assert_eq!(m.len(), 0);
        assert_eq!(m.upsert("k-new", || 1, |v| *v), Ok(1));
    }
}
