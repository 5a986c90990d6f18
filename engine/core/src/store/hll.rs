//! Distinct counts: HyperLogLog sketches over two fixed windows.
//!
//! A rule asks "how many different accounts has this device used recently?"
//! (`distinct("dev-acct:" + req.device_id, req.user, 3_600_000)`). Each key keeps the sketch of
//! the current fixed window and of the previous one; the answer is the size of their union, so it
//! covers between one and two windows of history (the same semantics the Redis store gives with
//! `PFADD key:window` and `PFCOUNT key:window key:previous`).
//!
//! Sketches start **sparse** — up to [`SPARSE_MAX`] exact 64-bit hashes, so small counts (the
//! thresholds rules actually use: 3 accounts per device, 20 IPs per user) are exact — and turn
//! **dense** past that: 2^[`P`] one-byte registers (2 KiB, standard error 1.04/√2048 ≈ 2.3%),
//! with linear counting for small ranges. Written here rather than taken from a crate because the
//! sparse/dense switch, the windowing and the bounded memory per key are the point, and the
//! algorithm is forty lines.

use crate::store::shard::{AtCapacity, ShardedMap};
use crate::store::StoreError;

/// Register index bits of the dense form.
pub const P: u32 = 11;
const M: usize = 1 << P;
/// Exact hashes kept before switching to registers (1 KiB, half the dense size).
pub const SPARSE_MAX: usize = 128;

/// One HyperLogLog sketch.
#[derive(Debug, Clone, PartialEq)]
pub enum Hll {
    /// Sorted, distinct 64-bit hashes.
    Sparse(Vec<u64>),
    Dense(Box<[u8]>),
}

impl Default for Hll {
    fn default() -> Self {
        Hll::Sparse(Vec::new())
    }
}

/// 64-bit hash of an item (xxh3: fast, well distributed, stable across processes).
pub fn item_hash(item: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(item.as_bytes())
}

fn register(h: u64) -> (usize, u8) {
    let idx = (h >> (64 - P)) as usize;
    let rest = h << P | (1 << (P - 1)); // guard bit bounds the rank
    (idx, rest.leading_zeros() as u8 + 1)
}

impl Hll {
    pub fn insert(&mut self, h: u64) {
        match self {
            Hll::Sparse(v) => {
                if let Err(pos) = v.binary_search(&h) {
                    v.insert(pos, h);
                    if v.len() > SPARSE_MAX {
                        *self = Hll::Dense(Self::dense_of(v));
                    }
                }
            }
            Hll::Dense(r) => {
                let (i, rank) = register(h);
                r[i] = r[i].max(rank);
            }
        }
    }

    fn dense_of(hashes: &[u64]) -> Box<[u8]> {
        let mut r = vec![0u8; M].into_boxed_slice();
        for &h in hashes {
            let (i, rank) = register(h);
            r[i] = r[i].max(rank);
        }
        r
    }

    fn registers(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Hll::Sparse(v) => std::borrow::Cow::Owned(Self::dense_of(v).into_vec()),
            Hll::Dense(r) => std::borrow::Cow::Borrowed(r),
        }
    }

    /// Estimated number of distinct items in the union of `self` and `other`.
    pub fn union_count(&self, other: &Hll) -> u64 {
        if let (Hll::Sparse(a), Hll::Sparse(b)) = (self, other) {
            let (mut i, mut j, mut n) = (0, 0, 0u64);
            while i < a.len() || j < b.len() {
                match (a.get(i), b.get(j)) {
                    (Some(x), Some(y)) if x == y => {
                        i += 1;
                        j += 1;
                    }
                    (Some(x), Some(y)) if x < y => i += 1,
                    (Some(_), None) => i += 1,
                    _ => j += 1,
                }
                n += 1;
            }
            return n;
        }
        let (a, b) = (self.registers(), other.registers());
        estimate(a.iter().zip(b.iter()).map(|(x, y)| *x.max(y)))
    }

    pub fn count(&self) -> u64 {
        match self {
            Hll::Sparse(v) => v.len() as u64,
            Hll::Dense(r) => estimate(r.iter().copied()),
        }
    }

    /// Approximate heap bytes.
    pub fn bytes(&self) -> usize {
        match self {
            Hll::Sparse(v) => v.capacity() * 8,
            Hll::Dense(_) => M,
        }
    }
}

fn estimate(regs: impl Iterator<Item = u8>) -> u64 {
    let m = M as f64;
    let (mut sum, mut zeros) = (0.0f64, 0usize);
    for r in regs {
        sum += 2f64.powi(-(r as i32));
        zeros += (r == 0) as usize;
    }
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let raw = alpha * m * m / sum;
    let e = if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    };
    e.round() as u64
}

/// Distinct-count state behind the `distinct` rule helper (local here; Redis implements it too).
pub trait DistinctStore: Send + Sync {
    /// Adds `item` to `key`'s set for the window of `window_ms` containing `now_ms` and returns
    /// the estimated number of distinct items in this window and the previous one.
    fn add(&self, key: &str, item: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError>;
    /// The same count without adding anything.
    fn count(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError>;
    fn maintain(&self, now_ms: i64);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Default)]
struct Windowed {
    start: i64,
    window: i64,
    cur: Hll,
    prev: Hll,
}

impl Windowed {
    /// Moves the windows forward to the one containing `now_ms`.
    fn roll(&mut self, now_ms: i64, window_ms: i64) {
        let aligned = now_ms.div_euclid(window_ms) * window_ms;
        if self.window != window_ms {
            *self = Windowed {
                start: aligned,
                window: window_ms,
                ..Default::default()
            };
        } else if aligned > self.start {
            self.prev = if aligned - self.start == window_ms {
                std::mem::take(&mut self.cur)
            } else {
                Hll::default()
            };
            self.cur = Hll::default();
            self.start = aligned;
        }
    }

    fn expired(&self, now_ms: i64) -> bool {
        now_ms >= self.start + 2 * self.window
    }
}

/// In-process distinct counts, sharded by key, bounded by `max_entries` keys.
pub struct LocalDistinct {
    windows: ShardedMap<Windowed>,
}

impl LocalDistinct {
    pub fn new(max_entries: usize) -> Self {
        LocalDistinct {
            windows: ShardedMap::new(max_entries),
        }
    }

    /// Forgets every key (regression runs start each sample from nothing).
    pub fn clear(&self) {
        self.windows.clear();
    }

    fn with<R>(
        &self,
        key: &str,
        now_ms: i64,
        window_ms: i64,
        create: bool,
        f: impl FnOnce(&mut Windowed) -> R,
    ) -> Result<Option<R>, StoreError> {
        if window_ms <= 0 {
            return Err(StoreError::Invalid(
                "distinct windows must be positive".into(),
            ));
        }
        let run = |w: &mut Windowed| {
            w.roll(now_ms, window_ms);
            f(w)
        };
        if !create {
            return Ok(self.windows.update(key, run));
        }
        self.windows
            .upsert(key, Windowed::default, run)
            .map(Some)
            .map_err(|AtCapacity(max)| {
                StoreError::Full(format!(
                    "distinct counter holds {max} keys (the configured maximum)"
                ))
            })
    }
}

impl DistinctStore for LocalDistinct {
    fn add(&self, key: &str, item: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError> {
        let h = item_hash(item);
        Ok(self
            .with(key, now_ms, window_ms, true, |w| {
                w.cur.insert(h);
                w.cur.union_count(&w.prev)
            })?
            .unwrap_or(0))
    }

    fn count(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError> {
        Ok(self
            .with(key, now_ms, window_ms, false, |w| {
                w.cur.union_count(&w.prev)
            })?
            .unwrap_or(0))
    }

    fn maintain(&self, now_ms: i64) {
        self.windows.purge(now_ms, |w| !w.expired(now_ms));
    }

    fn len(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_counts_are_exact() {
        let mut h = Hll::default();
        for i in 0..100 {
            h.insert(item_hash(&format!("user-{i}")));
            h.insert(item_hash(&format!("user-{i}")));
        }
        assert_eq!(h.count(), 100);
    }

    #[test]
    fn large_counts_are_within_a_few_percent() {
        for n in [1_000u64, 20_000, 200_000] {
            let mut h = Hll::default();
            for i in 0..n {
                h.insert(item_hash(&format!("item-{i}")));
            }
            let err = (h.count() as f64 - n as f64).abs() / n as f64;
            assert!(err < 0.07, "n={n} estimate={} err={err}", h.count());
            assert_eq!(h.bytes(), M);
        }
    }

    #[test]
    fn union_of_sparse_and_dense() {
        let mut a = Hll::default();
        let mut b = Hll::default();
        for i in 0..50 {
            a.insert(item_hash(&format!("x{i}")));
        }
        for i in 25..75 {
            b.insert(item_hash(&format!("x{i}")));
        }
        assert_eq!(a.union_count(&b), 75);
        for i in 0..5000 {
            b.insert(item_hash(&format!("y{i}")));
        }
        let u = a.union_count(&b) as f64;
        assert!((u - 5075.0).abs() / 5075.0 < 0.07, "{u}");
    }

    #[test]
    fn windows_cover_the_current_and_previous_window() {
        let d = LocalDistinct::new(100);
        let w = 1000;
        assert_eq!(d.add("k", "a", 100, w).unwrap(), 1);
        assert_eq!(d.add("k", "b", 900, w).unwrap(), 2);
        assert_eq!(d.add("k", "a", 1500, w).unwrap(), 2); // previous window still counts
        assert_eq!(d.add("k", "c", 2100, w).unwrap(), 2); // {a} of 1000..2000 and {c}
        assert_eq!(d.count("k", 4000, w).unwrap(), 0);
        assert_eq!(d.count("absent", 0, w).unwrap(), 0);
        assert!(d.add("k", "a", 0, 0).is_err());
    }

    #[test]
    fn bounded_keys() {
        let d = LocalDistinct::new(2);
        d.add("a", "x", 0, 1000).unwrap();
        d.add("b", "x", 0, 1000).unwrap();
        assert!(matches!(d.add("c", "x", 0, 1000), Err(StoreError::Full(_))));
        d.maintain(10_000);
        assert_eq!(d.len(), 0);
        d.add("c", "x", 10_000, 1000).unwrap();
    }
}
