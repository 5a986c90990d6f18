//! Per-thread caches of answers keyed by a whole value (no hash-collision risk), each with a
//! declared bound and a process-wide size for the `rampart_cache_*` gauges.
//!
//! A cache that reaches its bound starts over (cheaper than tracking recency on the decision
//! path, and a value worth caching comes back within a few thousand requests). The bound is per
//! thread; the process holds at most `bound × threads` entries per cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

/// Estimated bytes an entry costs besides its key's text: the table slot (the boxed key's pointer
/// and length, the value, a control byte) and the key's allocation overhead.
const ENTRY_OVERHEAD: usize = 48;

/// Entries per thread of each cache unless the configuration says otherwise.
pub const DEFAULT_BOUND: usize = 4096;

/// One kind of cache: its bound and what every thread's copy holds together.
#[derive(Debug)]
pub struct Sizes {
    pub name: &'static str,
    bound: AtomicUsize,
    entries: AtomicI64,
    bytes: AtomicI64,
}

impl Sizes {
    const fn new(name: &'static str, bound: usize) -> Sizes {
        Sizes {
            name,
            bound: AtomicUsize::new(bound),
            entries: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
        }
    }

    /// Entries per thread before the thread's copy starts over (at least 1).
    pub fn bound(&self) -> usize {
        self.bound.load(Ordering::Relaxed)
    }

    /// Sets the bound (from the configuration, before serving).
    pub fn set_bound(&self, n: usize) {
        self.bound.store(n.max(1), Ordering::Relaxed);
    }

    /// Entries held by every thread together.
    pub fn entries(&self) -> i64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Estimated bytes held by every thread together.
    pub fn bytes(&self) -> i64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn add(&self, entries: i64, bytes: i64) {
        self.entries.fetch_add(entries, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The edge WAF's answers for header values (`[waf] cache_entries`).
pub static WAF_VALUES: Sizes = Sizes::new("waf_values", DEFAULT_BOUND);
/// The edge WAF's answers for paths (`[waf] cache_entries`).
pub static WAF_PATHS: Sizes = Sizes::new("waf_paths", DEFAULT_BOUND);
/// `contains_any` answers of string lists, per list, the 8 newest lists (`[rules] list_cache_entries`).
pub static LIST_ANSWERS: Sizes = Sizes::new("list_answers", DEFAULT_BOUND);

/// Every kind of cache.
pub fn all() -> [&'static Sizes; 3] {
    [&WAF_VALUES, &WAF_PATHS, &LIST_ANSWERS]
}

/// One thread's cache of one kind.
pub struct Memo<V> {
    map: HashMap<Box<str>, V>,
    bytes: usize,
    sizes: &'static Sizes,
}

impl<V: Copy> Memo<V> {
    pub fn new(sizes: &'static Sizes) -> Memo<V> {
        Memo {
            map: HashMap::new(),
            bytes: 0,
            sizes,
        }
    }

    pub fn get(&self, key: &str) -> Option<V> {
        self.map.get(key).copied()
    }

    pub fn insert(&mut self, key: &str, v: V) {
        if self.map.len() >= self.sizes.bound() {
            self.clear();
        }
        if self.map.insert(key.into(), v).is_none() {
            let b = key.len() + ENTRY_OVERHEAD;
            self.bytes += b;
            self.sizes.add(1, b as i64);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets every entry and gives the table's memory back.
    pub fn clear(&mut self) {
        self.sizes
            .add(-(self.map.len() as i64), -(self.bytes as i64));
        self.map = HashMap::new();
        self.bytes = 0;
    }
}

impl<V> Drop for Memo<V> {
    fn drop(&mut self) {
        self.sizes
            .add(-(self.map.len() as i64), -(self.bytes as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST: Sizes = Sizes::new("test", 100);

    /// However many distinct values come, a cache holds at most its bound, and the process-wide
    /// size follows it down to zero when the thread's cache goes.
    #[test]
    fn distinct_values_leave_a_cache_at_its_bound() {
        let mut m: Memo<bool> = Memo::new(&TEST);
        for i in 0..10_000 {
            m.insert(&format!("user-{i}"), i % 2 == 0);
            assert!(m.len() <= 100);
            assert_eq!(TEST.entries(), m.len() as i64);
        }
        assert!(TEST.bytes() > 0);
        m.insert("user-9999", true);
        assert_eq!(
            TEST.entries(),
            m.len() as i64,
            "a repeated key is not counted twice"
        );
        drop(m);
        assert_eq!((TEST.entries(), TEST.bytes()), (0, 0));
    }
}
