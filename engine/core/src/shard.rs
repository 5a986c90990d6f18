//! A bounded map from string keys to per-key state, sharded over mutexes: the in-process layout
//! of the limiter and distinct-count stores. Each key's update runs under its shard's lock, so it
//! is atomic per key; the number of keys is capped (past it, new keys are refused and the caller's
//! failure policy applies); expired state is purged at most once per [`PURGE_EVERY_MS`].

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::ttl::PurgeGate;
#[cfg(doc)]
use crate::ttl::PURGE_EVERY_MS;

const SHARDS: usize = 64;

type Shard<V> = Mutex<HashMap<Box<str>, V>>;

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
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            len: AtomicUsize::new(0),
            max_entries,
            last_purge: PurgeGate::new(),
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, HashMap<Box<str>, V>> {
        self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on `key`'s state, creating it with `create` when absent (unless at capacity).
    pub(crate) fn upsert<R>(
        &self,
        key: &str,
        create: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<R, AtCapacity> {
        let mut map = self.shard(key);
        if let Some(v) = map.get_mut(key) {
            return Ok(f(v));
        }
        if self.len.load(Ordering::Relaxed) >= self.max_entries {
            return Err(AtCapacity(self.max_entries));
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(f(map.entry(key.into()).or_insert_with(create)))
    }

    /// Runs `f` on `key`'s state if it exists, creating nothing.
    pub(crate) fn update<R>(&self, key: &str, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        self.shard(key).get_mut(key).map(f)
    }

    /// Drops the entries `keep` rejects: every shard about once per purge interval, a few shards
    /// per call.
    pub(crate) fn purge(&self, now_ms: i64, mut keep: impl FnMut(&V) -> bool) {
        let due = self.last_purge.due(now_ms, SHARDS);
        for i in crate::ttl::shard_indices(due, SHARDS) {
            let mut map = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
            let before = map.len();
            map.retain(|_, v| keep(v));
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
