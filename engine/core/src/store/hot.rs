//! The hottest keys of the counting helpers on this instance — which rate-limit keys and counters
//! are called most, and how often a rate limit refused — over the current minute and the one
//! before, in bounded memory.
//!
//! Each of [`SHARDS`] shards keeps a Space-Saving summary (Metwally et al.) of at most
//! [`CAPACITY`] keys per helper and minute: a new key, once the summary is full, takes the place of the
//! least-called one and inherits its count as its possible error. Any key called more than
//! `calls / CAPACITY` times in a shard's minute is in that shard's summary, with a count off by at
//! most its `error`. A thread records into the shard of its own id, so shards are rarely
//! contended; a reader merges them. Memory: `SHARDS × 2 minutes × 2 helpers × CAPACITY` entries
//! at most, whatever the traffic.

use std::collections::HashMap;
use std::sync::Mutex;

/// Shards (threads are spread over them).
pub const SHARDS: usize = 8;
/// Keys kept per shard, minute and helper.
pub const CAPACITY: usize = 64;
const MINUTE_MS: i64 = 60_000;

/// Which helper a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HotKind {
    RateLimit,
    Count,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    calls: u64,
    refused: u64,
    /// What the key may have been credited that belonged to the key it replaced.
    error: u64,
}

/// One kept key: its hash (compared first), the key, its counts.
struct Slot {
    hash: u64,
    key: Box<str>,
    counts: Counts,
}

/// One minute of one shard: per helper, at most [`CAPACITY`] keys, in a flat list (a scan of 64
/// hashes is cheaper than a map's lookup, and finding the least-called key is a scan anyway).
#[derive(Default)]
struct Summary {
    keys: [Vec<Slot>; 2],
}

fn hash(key: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write(key.as_bytes());
    h.finish()
}

impl Summary {
    fn record(&mut self, kind: HotKind, key: &str, refused: bool) {
        let slots = &mut self.keys[kind as usize];
        let h = hash(key);
        if let Some(s) = slots.iter_mut().find(|s| s.hash == h && &*s.key == key) {
            s.counts.calls += 1;
            s.counts.refused += refused as u64;
            return;
        }
        let mut counts = Counts {
            calls: 1,
            refused: refused as u64,
            error: 0,
        };
        if slots.len() < CAPACITY {
            slots.push(Slot {
                hash: h,
                key: key.into(),
                counts,
            });
            return;
        }
        // Full: the new key takes the least-called one's place and inherits its count as error.
        let Some(victim) = slots.iter_mut().min_by_key(|s| s.counts.calls) else {
            return;
        };
        counts.calls += victim.counts.calls;
        counts.error = victim.counts.calls;
        *victim = Slot {
            hash: h,
            key: key.into(),
            counts,
        };
    }
}

#[derive(Default)]
struct Shard {
    minute: i64,
    current: Summary,
    previous: Summary,
}

impl Shard {
    /// Moves to `minute`: the current summary becomes the previous one (or both are dropped when
    /// more than a minute passed).
    fn roll(&mut self, minute: i64) {
        if minute == self.minute {
            return;
        }
        self.previous = if minute == self.minute + 1 {
            std::mem::take(&mut self.current)
        } else {
            self.current = Summary::default();
            Summary::default()
        };
        self.minute = minute;
    }
}

/// One key in [`HotKeys::top`]: calls over the current and the previous minute.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HotKey {
    pub kind: HotKind,
    pub key: String,
    pub calls: u64,
    /// Calls a rate limit refused (0 for counters).
    pub refused: u64,
    /// How many of `calls` may belong to other keys (the summary's bound; 0 when exact).
    pub error: u64,
}

/// The hottest keys of this instance's counting helpers (see the module's notes).
pub struct HotKeys {
    shards: [Mutex<Shard>; SHARDS],
}

impl Default for HotKeys {
    fn default() -> Self {
        HotKeys {
            shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
        }
    }
}

impl std::fmt::Debug for HotKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HotKeys")
    }
}

thread_local! {
    /// This thread's shard.
    static SHARD: usize = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::thread::current().id().hash(&mut h);
        h.finish() as usize % SHARDS
    };
}

impl HotKeys {
    pub fn new() -> Self {
        Self::default()
    }

    /// One call of `kind` on `key` at `now_ms` (and whether a rate limit refused it).
    pub fn record(&self, kind: HotKind, key: &str, refused: bool, now_ms: i64) {
        let i = SHARD.with(|s| *s);
        let mut shard = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
        shard.roll(now_ms.div_euclid(MINUTE_MS));
        shard.current.record(kind, key, refused);
    }

    /// The `n` keys called most over the current minute and the one before, most called first.
    pub fn top(&self, n: usize, now_ms: i64) -> Vec<HotKey> {
        let minute = now_ms.div_euclid(MINUTE_MS);
        let mut merged: HashMap<(HotKind, Box<str>), Counts> = HashMap::new();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            let summaries: &[&Summary] = match minute - shard.minute {
                0 => &[&shard.current, &shard.previous],
                1 => &[&shard.current],
                _ => &[],
            };
            for s in summaries {
                for (kind, slots) in [HotKind::RateLimit, HotKind::Count].iter().zip(&s.keys) {
                    for slot in slots {
                        let m = merged.entry((*kind, slot.key.clone())).or_default();
                        m.calls += slot.counts.calls;
                        m.refused += slot.counts.refused;
                        m.error += slot.counts.error;
                    }
                }
            }
        }
        let mut out: Vec<HotKey> = merged
            .into_iter()
            .map(|((kind, key), c)| HotKey {
                kind,
                key: key.into(),
                calls: c.calls,
                refused: c.refused,
                error: c.error,
            })
            .collect();
        out.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.key.cmp(&b.key)));
        out.truncate(n);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heavy_hitters_come_first_and_memory_stays_bounded() {
        let h = HotKeys::new();
        let t = 120_000;
        // Two hot keys among 10,000 that are called once each.
        for i in 0..10_000 {
            h.record(HotKind::RateLimit, &format!("ip:cold-{i}"), false, t);
            if i % 10 == 0 {
                h.record(HotKind::RateLimit, "ip:hot", i % 20 == 0, t);
            }
            if i % 25 == 0 {
                h.record(HotKind::Count, "orders:warm", false, t);
            }
        }
        let top = h.top(3, t + 1);
        assert_eq!(top[0].key, "ip:hot");
        assert_eq!(top[0].kind, HotKind::RateLimit);
        // Space-Saving overestimates by at most `error`, and never underestimates.
        assert!(
            top[0].calls >= 1_000 && top[0].calls - top[0].error <= 1_000,
            "{top:?}"
        );
        assert_eq!(top[0].refused, 500);
        assert_eq!(top[1].key, "orders:warm");
        assert!(
            top[1].calls >= 400 && top[1].calls - top[1].error <= 400,
            "{top:?}"
        );
        // Bounded: one thread, one shard, at most CAPACITY keys per helper.
        let kept: usize = h
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap()
                    .current
                    .keys
                    .iter()
                    .map(Vec::len)
                    .sum::<usize>()
            })
            .sum();
        assert!(kept <= 2 * CAPACITY);
    }

    #[test]
    fn keys_age_out_after_two_minutes() {
        let h = HotKeys::new();
        h.record(HotKind::Count, "a", false, 0);
        h.record(HotKind::Count, "b", false, 60_000);
        let keys = |now| -> Vec<String> { h.top(10, now).into_iter().map(|k| k.key).collect() };
        assert_eq!(keys(60_001), ["a", "b"]);
        assert_eq!(keys(120_001), ["b"]);
        assert!(keys(180_001).is_empty());
        // A later call in another minute drops what is older than the minute before.
        h.record(HotKind::Count, "c", false, 300_000);
        assert_eq!(keys(300_001), ["c"]);
    }
}
