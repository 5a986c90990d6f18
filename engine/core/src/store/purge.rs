//! What the sharded in-process stores ([`super::ttl::TtlSet`], [`super::shard::ShardedMap`]) share:
//! which shard a hash lands in, and when each shard's expired entries are purged.

/// The shard of a key's hash: bits the tables use for neither the slot (low bits) nor the
/// control byte (top 7 bits), so each shard's keys still spread over its whole table.
pub(crate) fn shard_of(hash: u64, shards: usize) -> usize {
    ((hash >> 40) as usize) % shards
}

/// `purge` scans every entry under each shard's lock; doing it at most this often keeps the scan
/// off the decision path's back (expired entries are ignored by lookups anyway).
pub(crate) const PURGE_EVERY_MS: i64 = 1000;

/// Spreads the purge of a sharded map over [`PURGE_EVERY_MS`]: each call hands out the shards that
/// have come due since the previous one, round-robin, so every shard is purged about once per
/// interval. A whole pass at once held the CPU for tens of ms every second with a million keys,
/// long enough to show in the decision path's p99 on a small machine; in slices, no call scans
/// more than its share.
#[derive(Debug)]
pub(crate) struct PurgeGate(std::sync::Mutex<(i64, usize)>);

impl PurgeGate {
    pub(crate) fn new() -> Self {
        PurgeGate(std::sync::Mutex::new((i64::MIN, 0)))
    }

    /// The shard indices (of `shards`) to purge now; empty when none is due or another caller is
    /// purging.
    pub(crate) fn due(&self, now_ms: i64, shards: usize) -> std::ops::Range<usize> {
        let Ok(mut g) = self.0.try_lock() else {
            return 0..0;
        };
        let (last, next) = *g;
        let elapsed = now_ms.saturating_sub(last);
        let n = if elapsed >= PURGE_EVERY_MS {
            shards
        } else {
            (elapsed.max(0) as usize * shards) / PURGE_EVERY_MS as usize
        };
        if n == 0 {
            return 0..0;
        }
        // Time is credited for the shards handed out, so the rate stays one pass per interval.
        *g = (
            if n == shards {
                now_ms
            } else {
                last + (n * PURGE_EVERY_MS as usize / shards) as i64
            },
            (next + n) % shards,
        );
        next..next + n
    }
}

/// `range` of [`PurgeGate::due`] as shard indices (it may wrap past the last shard).
pub(crate) fn shard_indices(
    range: std::ops::Range<usize>,
    shards: usize,
) -> impl Iterator<Item = usize> {
    range.map(move |i| i % shards)
}
