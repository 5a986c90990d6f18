//! The nonce filter: a time-sliced, cache-line-blocked Bloom filter with an atomic check-and-insert.
//!
//! Kept here rather than taken from a Bloom filter crate (`fastbloom` is measured beside it in the
//! README): none slices by the request's own timestamp or checks and sets a key's bits as one
//! atomic step, and those are the two invariants below.
//!
//! # Design (and why it keeps the invariants of DESIGN §2)
//!
//! **Sliced by the request's own timestamp.** A request is inserted into the slice that covers its
//! `x-timestamp`, never "the current slice". The signature covers the timestamp, so a replay of a
//! captured request carries the same timestamp and lands in the same slice, whenever it arrives.
//! A slice covering timestamps `[a, a+S)` is kept until server time reaches
//! `a + S − W_max + retention`; with `retention ≥ 2·W` that is at least `ts + W` for every timestamp
//! in it — the last instant at which the window check would still accept that timestamp. So there is
//! no rotation gap at either window edge: a slice is only recycled once no request that maps to it
//! can pass the window check any more. (A two-bucket filter rotated every W forgets a nonce after as
//! little as W; a replay can arrive up to 2W after the first sighting.)
//!
//! **All probe bits of a key live in one 64-byte block (one cache line).** One key costs one cache
//! miss instead of k. Bit 63 of the block's last word is a lock bit: check-and-insert takes the lock
//! with one atomic `fetch_or`, reads and sets the k bits, and releases the lock with the same store
//! that writes the last word. Racing identical requests map to the same block and are serialised by
//! it, so exactly one of them sees "new". (Setting k bits with k independent atomic ORs lets two
//! racers both see a newly set bit and both pass.) Distinct keys in different blocks never contend.
//!
//! **Recycling never races a probe.** A slot is reused for a newer slice only under each of its
//! blocks' lock bits: a check-and-insert of the old slice that holds a block's lock (it may have
//! stalled there, descheduled, for any length of time) finishes its write before the block is
//! cleared, and a request of the new slice takes the lock after the clearing. A probe that stalls
//! across the recycle answers "out of range" (its slot changed under it); it can never write stale
//! words back over bits of the new slice.
//!
//! **Sectorised probes.** The k probe bits are spread evenly over the block's eight 64-bit words
//! (k/8 bits per word, k ∈ {8, 16}), each position taken straight from the hash: no loop, no
//! rejection, the eight masks are built branch-free. Within a 512-bit block this costs almost nothing
//! in accuracy (a bit is set with probability 1 − (1 − 1/64)^(2i) instead of 1 − (1 − 1/511)^(16i)).
//!
//! **Sizing.** Each slice is sized for `expected_rps × S` entries. The bits per entry and k come from
//! the false-positive formula of a sectorised blocked Bloom filter (a Poisson mixture of per-block
//! occupancy, Putze–Sanders–Singler 2007), searched for the smallest size that meets the target;
//! at 1e-6 that is 39.5 bits/entry with k = 16, 1.37× the unblocked bound of 28.76 — the price of
//! one cache line per key. Below ~1e-7 a single cache line needs disproportionately many bits; use
//! exact mode there.
//!
//! **Hashing.** xxh3-128 keyed by a per-filter seed and the app, over the nonce; no allocation.
//! The block comes from the high 64 bits (multiply-shift range reduction, so it uses the top bits),
//! the positions from the low 64 bits and the low 32 of the high half: 16 × 6 = 96 independent bits.
//! (Not double hashing: within a 512-bit block, two keys with the same (a, b) pair would collide on
//! all k bits with probability ~1/260k, far above a 1e-6 target.)
//!
//! **Prefetch.** [`SlicedBloom::prefetch`] loads a key's block into cache without touching its
//! contents; the decision path issues it before the signature check so the nonce step rarely waits
//! for memory.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Bits in one block (one cache line).
pub const BLOCK_BITS: u32 = 512;
/// Bits usable for keys: the block's last bit is its lock.
const USABLE_BITS: u32 = 511;
const LOCK: u64 = 1 << 63;
/// Marker for a slot that holds no slice (or is being cleared).
const NO_SLICE: i64 = i64::MIN;
/// First bytes of a filter snapshot ([`SlicedBloom::write_to`]), with its format version.
const SNAPSHOT_MAGIC: &[u8; 8] = b"RSBLOOM1";

#[repr(align(64))]
struct Block([AtomicU64; 8]);

/// The filter's memory: one zeroed allocation for every slot, aligned to 2 MiB and advised as
/// transparent huge pages on Linux when it is that large, so that a random probe costs a cache miss
/// but rarely a TLB miss as well (a page walk is expensive, more so under virtualisation).
struct BlockBuf {
    ptr: std::ptr::NonNull<Block>,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is only accessed through `&[Block]`, and `Block` is made of atomics.
unsafe impl Send for BlockBuf {}
unsafe impl Sync for BlockBuf {}

const HUGE_PAGE: usize = 2 * 1024 * 1024;

impl BlockBuf {
    fn zeroed(len: usize) -> Self {
        let bytes = len.max(1) * std::mem::size_of::<Block>();
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            std::mem::align_of::<Block>()
        };
        let size = bytes.div_ceil(align) * align;
        let layout = std::alloc::Layout::from_size_align(size, align).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw as *mut Block) else {
            std::alloc::handle_alloc_error(layout)
        };
        #[cfg(target_os = "linux")]
        if align == HUGE_PAGE {
            // SAFETY: the range is the allocation just made; the advice is only a hint.
            unsafe { libc::madvise(raw as *mut libc::c_void, size, libc::MADV_HUGEPAGE) };
        }
        // SAFETY: all-zero bytes are a valid `Block` (atomics of 0).
        unsafe { std::ptr::write_bytes(raw, 0, size) };
        BlockBuf { ptr, len, layout }
    }

    fn as_slice(&self) -> &[Block] {
        // SAFETY: `ptr` points to `len` initialised blocks owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for BlockBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout) };
    }
}

/// Exact division of non-negative values below 2^64 / d by a fixed divisor d, with one multiply:
/// q = ⌊n · M / 2^64⌋ with M = ⌊2^64 / d⌋ + 1 (error n·(M − 2^64/d)/2^64 < 1/d for n < 2^64/d).
#[derive(Debug, Clone, Copy)]
struct FastDiv {
    d: u64,
    m: u128,
    limit: u64,
}

impl FastDiv {
    fn new(d: u64) -> Self {
        let d = d.max(1);
        FastDiv {
            d,
            m: (u64::MAX / d) as u128 + 1,
            limit: u64::MAX / d,
        }
    }

    #[inline(always)]
    fn div_euclid(&self, n: i64) -> i64 {
        if n >= 0 && (n as u64) < self.limit {
            ((n as u128 * self.m) >> 64) as i64
        } else {
            n.div_euclid(self.d as i64)
        }
    }

    #[inline(always)]
    fn rem_euclid(&self, n: i64) -> i64 {
        // The product can leave i64 near i64::MIN (floor division rounds away from zero there);
        // the remainder itself always fits, so wrapping arithmetic gives it exactly.
        n.wrapping_sub(self.div_euclid(n).wrapping_mul(self.d as i64))
    }
}

/// Bits per entry and probes per key chosen for a target false-positive rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BloomDesign {
    pub bits_per_entry: f64,
    pub k: u32,
    /// The false-positive rate the formula predicts at design load.
    pub expected_fp: f64,
}

/// False-positive rate of the sectorised 512-bit-blocked filter with `bits_per_entry` and `k`
/// probes (k/8 per 64-bit word), at design load.
pub fn blocked_fp(bits_per_entry: f64, k: u32) -> f64 {
    let lambda = BLOCK_BITS as f64 / bits_per_entry;
    blocked_fp_at_occupancy(lambda, k)
}

/// The same formula for a mean of `lambda` keys per block:
/// Σ_i Poisson(i; λ) · P(all k/8 probes of a word are set | i keys)^8, where a word's bit is set with
/// probability q = 1 − (1 − 1/64)^(k/8 · i) (two probes of one key may coincide: probability 1/64).
pub fn blocked_fp_at_occupancy(lambda: f64, k: u32) -> f64 {
    if lambda <= 0.0 {
        return 0.0;
    }
    let per_word = (k / 8).max(1) as f64;
    let upper = (lambda + 40.0 * lambda.sqrt() + 50.0) as usize;
    let mut p = (-lambda).exp();
    let mut sum = 0.0;
    for i in 0..=upper {
        if i > 0 {
            p *= lambda / i as f64;
        }
        let q = 1.0 - (1.0 - 1.0 / 64.0f64).powf(per_word * i as f64);
        let word = if per_word >= 2.0 {
            q / 64.0 + q * q * 63.0 / 64.0
        } else {
            q
        };
        sum += p * word.powi(8);
    }
    sum
}

/// Bits per entry of a standard (unblocked) Bloom filter: −ln p / (ln 2)².
pub fn standard_bits_per_entry(target_fp: f64) -> f64 {
    -target_fp.ln() / (std::f64::consts::LN_2 * std::f64::consts::LN_2)
}

/// The smallest design (in steps of 1/4 bit per entry) whose predicted FP is ≤ `target_fp`.
pub fn design_for(target_fp: f64) -> BloomDesign {
    let target = target_fp.clamp(1e-12, 0.5);
    let mut c = 4.0;
    loop {
        let (fp, k) = [8, 16]
            .into_iter()
            .map(|k| (blocked_fp(c, k), k))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("non-empty");
        if fp <= target || c >= 128.0 {
            return BloomDesign {
                bits_per_entry: c,
                k,
                expected_fp: fp,
            };
        }
        c += 0.25;
    }
}

/// Sizing of a sliced filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlicedBloomConfig {
    /// Peak rate of inserts (accepted requests) the filter is sized for.
    pub expected_rps: u64,
    /// Width of a slice of request timestamps.
    pub slice_ms: i64,
    /// How long a record is kept, counted from the earliest moment its request could be accepted
    /// (`ts − W`). Must be ≥ 2·W.
    pub retention_ms: i64,
    /// The largest acceptance window of any app using the filter.
    pub max_window_ms: i64,
    /// Target false-positive rate at design load.
    pub target_fp: f64,
}

impl SlicedBloomConfig {
    /// Number of slots in the ring: enough to hold every slice that is still live plus the next one,
    /// prepared ahead by `maintain`. Slice `s` must live until `(s+1)·S − W + R + G` (grace G = one
    /// slice for requests in flight); the newest insertable slice is `⌊(now+W)/S⌋`; so
    /// `(N−1)·S ≥ R + G` for the newest, and one more slot to clear the next one off the hot path.
    pub fn slots(&self) -> usize {
        let s = self.slice_ms.max(1);
        ((self.retention_ms + s - 1) / s + 3) as usize
    }

    pub fn capacity_per_slice(&self) -> u64 {
        (self
            .expected_rps
            .saturating_mul(self.slice_ms.max(1) as u64)
            / 1000)
            .max(64)
    }

    pub fn design(&self) -> BloomDesign {
        design_for(self.target_fp)
    }

    pub fn blocks_per_slice(&self) -> usize {
        let bits = self.capacity_per_slice() as f64 * self.design().bits_per_entry;
        ((bits / BLOCK_BITS as f64).ceil() as usize).max(1)
    }

    /// Total memory of the bit arrays, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.slots() as u64 * self.blocks_per_slice() as u64 * (BLOCK_BITS as u64 / 8)
    }

    /// Bits per entry at design load, counting every slot the ring keeps (the real memory cost of
    /// one remembered nonce over its whole retention).
    pub fn effective_bits_per_entry(&self) -> f64 {
        let live_entries = self.expected_rps as f64 * self.retention_ms as f64 / 1000.0;
        self.memory_bytes() as f64 * 8.0 / live_entries.max(1.0)
    }
}

/// Outcome of a check-and-insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// First sighting: the key was inserted.
    New,
    /// All probe bits were already set: a replay (or, with the designed small probability, a
    /// false positive).
    Seen,
    /// The timestamp's slice is no longer (or not yet) held: the request is outside what the
    /// filter can judge. Callers reject it as out of window.
    OutOfRange,
}

/// Live figures of one filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BloomStats {
    pub memory_bytes: u64,
    pub slots: usize,
    pub capacity_per_slice: u64,
    /// Fraction of bits set in the fullest live slice.
    pub fill_ratio: f64,
    /// Estimated false-positive rate of a query against the fullest live slice right now.
    pub estimated_fp: f64,
    /// Estimated entries in the fullest live slice.
    pub estimated_entries: f64,
    /// True when a slice holds more entries than the filter was designed for.
    pub overloaded: bool,
}

struct Slot {
    slice: AtomicI64,
}

/// A time-sliced blocked Bloom filter. See the module docs.
pub struct SlicedBloom {
    cfg: SlicedBloomConfig,
    design: BloomDesign,
    seed: u64,
    slots: Box<[Slot]>,
    blocks: BlockBuf,
    nblocks: u64,
    slice_div: FastDiv,
    slot_div: FastDiv,
    /// Serialises slot (re)assignment, which is rare and off the hot path when `maintain` runs.
    assign: Mutex<()>,
}

impl std::fmt::Debug for SlicedBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlicedBloom")
            .field("cfg", &self.cfg)
            .field("design", &self.design)
            .finish_non_exhaustive()
    }
}

#[inline(always)]
fn prefetch_line(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, even on an invalid address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl SlicedBloom {
    pub fn new(cfg: SlicedBloomConfig, seed: u64) -> Self {
        let design = cfg.design();
        let nblocks = cfg.blocks_per_slice();
        let nslots = cfg.slots();
        let slots = (0..nslots)
            .map(|_| Slot {
                slice: AtomicI64::new(NO_SLICE),
            })
            .collect();
        SlicedBloom {
            cfg,
            design,
            seed,
            slots,
            blocks: BlockBuf::zeroed(nslots * nblocks),
            nblocks: nblocks as u64,
            slice_div: FastDiv::new(cfg.slice_ms.max(1) as u64),
            slot_div: FastDiv::new(nslots as u64),
            assign: Mutex::new(()),
        }
    }

    pub fn config(&self) -> &SlicedBloomConfig {
        &self.cfg
    }

    pub fn bloom_design(&self) -> BloomDesign {
        self.design
    }

    /// Hashes a key of `scope` (the app) into its 128-bit filter hash: xxh3-64 keyed by the seed and
    /// the scope, widened by one multiply-fold (wyhash's mixer) — cheaper than xxh3-128 for short
    /// nonces, and 64 bits of entropy are plenty to place a key in a block.
    #[inline]
    pub fn hash(&self, scope: u64, key: &[u8]) -> u128 {
        let lo = xxh3_64_with_seed(key, self.seed ^ scope);
        let m = (lo ^ 0xa076_1d64_78bd_642f) as u128 * 0xe703_7ed1_a0b4_28db_u128;
        let hi = (m as u64) ^ ((m >> 64) as u64);
        ((hi as u128) << 64) | lo as u128
    }

    #[inline]
    fn slice_of(&self, ts_ms: i64) -> i64 {
        self.slice_div.div_euclid(ts_ms)
    }

    /// The blocks of slot `i`.
    #[inline]
    fn blocks_of(&self, i: usize) -> &[Block] {
        let n = self.nblocks as usize;
        &self.blocks.as_slice()[i * n..(i + 1) * n]
    }

    /// Server time from which the slice may be recycled.
    fn expiry_of(&self, slice: i64) -> i64 {
        let s = self.cfg.slice_ms.max(1);
        (slice + 1)
            .saturating_mul(s)
            .saturating_sub(self.cfg.max_window_ms)
            .saturating_add(self.cfg.retention_ms)
            .saturating_add(s)
    }

    #[inline]
    fn slot_index(&self, slice: i64) -> usize {
        self.slot_div.rem_euclid(slice) as usize
    }

    /// Makes `slot` hold `slice` if its current slice has expired. Returns whether it holds `slice`.
    fn assign(&self, slice: i64, now_ms: i64) -> bool {
        let idx = self.slot_index(slice);
        let slot = &self.slots[idx];
        let _guard = self.assign.lock().unwrap_or_else(|e| e.into_inner());
        let cur = slot.slice.load(Ordering::Acquire);
        if cur == slice {
            return true;
        }
        if cur != NO_SLICE && (cur > slice || now_ms < self.expiry_of(cur)) {
            // The slot still holds a live slice (or a newer one): this timestamp is not judgeable.
            return false;
        }
        slot.slice.store(NO_SLICE, Ordering::Release);
        for b in self.blocks_of(idx) {
            // Each block is cleared under its own lock bit: a probe of the old slice that is
            // inside its check-and-insert (lock held, words read) finishes writing first, and its
            // write lands in the old slice, before the clearing. Without the lock, a probe that
            // stalled across the recycle would write its stale words back over bits a request of
            // the new slice had set meanwhile, and a replay of that request would pass.
            Self::lock(b);
            for w in &b.0[..7] {
                w.store(0, Ordering::Relaxed);
            }
            // Release: the cleared words are published with the unlock.
            b.0[7].store(0, Ordering::Release);
        }
        slot.slice.store(slice, Ordering::Release);
        true
    }

    /// Prepares the slots for the timestamps that can be accepted soon, so that the hot path
    /// rarely clears memory. Call it a few times per slice (the server does, from a timer).
    pub fn maintain(&self, now_ms: i64) {
        let hi = self.slice_of(now_ms.saturating_add(self.cfg.max_window_ms));
        let lo = self.slice_of(now_ms.saturating_sub(self.cfg.max_window_ms));
        for s in lo..=hi.saturating_add(1) {
            let slot = &self.slots[self.slot_index(s)];
            if slot.slice.load(Ordering::Acquire) != s {
                self.assign(s, now_ms);
            }
        }
    }

    /// Atomically checks whether `hash` was seen in the slice of `ts_ms`, inserting it if not.
    pub fn check_and_insert(&self, hash: u128, ts_ms: i64, now_ms: i64) -> Probe {
        let slice = self.slice_of(ts_ms);
        let idx = self.slot_index(slice);
        let slot = &self.slots[idx];
        if slot.slice.load(Ordering::Acquire) != slice && !self.assign(slice, now_ms) {
            return Probe::OutOfRange;
        }
        let (block_idx, masks) = self.locate(hash);
        let block = &self.blocks_of(idx)[block_idx];
        let seen = Self::lock_check_set(block, &masks);
        // A slot is recycled only after every timestamp in it fails the window check; if it happened
        // while this request was in flight, the request is too old to judge.
        if slot.slice.load(Ordering::Acquire) != slice {
            return Probe::OutOfRange;
        }
        if seen {
            Probe::Seen
        } else {
            Probe::New
        }
    }

    /// Read-only membership test (for diagnostics and tests).
    pub fn contains(&self, hash: u128, ts_ms: i64) -> bool {
        let slice = self.slice_of(ts_ms);
        let idx = self.slot_index(slice);
        if self.slots[idx].slice.load(Ordering::Acquire) != slice {
            return false;
        }
        let (block_idx, masks) = self.locate(hash);
        let block = &self.blocks_of(idx)[block_idx];
        masks
            .iter()
            .zip(block.0.iter())
            .all(|(m, w)| w.load(Ordering::Acquire) & m == *m)
    }

    #[inline]
    fn locate(&self, hash: u128) -> (usize, [u64; 8]) {
        let lo = hash as u64;
        let hi = (hash >> 64) as u64;
        let block_idx = ((hi as u128 * self.nblocks as u128) >> 64) as usize;
        let mut masks = [0u64; 8];
        if self.design.k >= 16 {
            // 16 six-bit positions: words 0..=4 from `lo` (60 bits), words 5..=7 from `hi` (36 bits).
            let bits = |src: u64, n: u32| (src >> (6 * n)) & 63;
            for (w, m) in masks.iter_mut().enumerate().take(5) {
                let n = 2 * w as u32;
                *m = (1u64 << bits(lo, n)) | (1u64 << bits(lo, n + 1));
            }
            for (w, m) in masks.iter_mut().enumerate().skip(5) {
                let n = 2 * (w as u32 - 5);
                *m = (1u64 << bits(hi, n)) | (1u64 << bits(hi, n + 1));
            }
        } else {
            for (w, m) in masks.iter_mut().enumerate() {
                *m = 1u64 << ((lo >> (6 * w)) & 63);
            }
        }
        // Bit 63 of word 7 is the lock: move a probe that lands there to bit 62.
        if masks[7] & LOCK != 0 {
            masks[7] = (masks[7] & !LOCK) | (1 << 62);
        }
        (block_idx, masks)
    }

    /// Brings the block of `hash` in the slice of `ts_ms` into cache, without reading or writing it
    /// (a hint: no effect on correctness; a no-op on targets without a prefetch instruction).
    #[inline]
    pub fn prefetch(&self, hash: u128, ts_ms: i64) {
        let idx = self.slot_index(self.slice_of(ts_ms));
        let hi = (hash >> 64) as u64;
        let block_idx = ((hi as u128 * self.nblocks as u128) >> 64) as usize;
        if let Some(block) = self.blocks_of(idx).get(block_idx) {
            prefetch_line(block as *const Block as *const i8);
        }
    }

    /// Check-and-insert of many keys of one timestamp, software-pipelined: each key's block is
    /// prefetched a few keys ahead, so cache misses overlap instead of queueing.
    pub fn check_and_insert_many(
        &self,
        hashes: &[u128],
        ts_ms: i64,
        now_ms: i64,
        out: &mut Vec<Probe>,
    ) {
        const AHEAD: usize = 8;
        for h in hashes.iter().take(AHEAD) {
            self.prefetch(*h, ts_ms);
        }
        for (i, h) in hashes.iter().enumerate() {
            if let Some(next) = hashes.get(i + AHEAD) {
                self.prefetch(*next, ts_ms);
            }
            out.push(self.check_and_insert(*h, ts_ms, now_ms));
        }
    }

    /// Takes the block's lock bit (spinning, then yielding, while another thread holds it).
    /// Returns the last word as it was, lock bit clear.
    #[inline]
    fn lock(block: &Block) -> u64 {
        let last = &block.0[7];
        let mut spins = 0u32;
        loop {
            let prev = last.fetch_or(LOCK, Ordering::Acquire);
            if prev & LOCK == 0 {
                break prev;
            }
            loop {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                if last.load(Ordering::Relaxed) & LOCK == 0 {
                    break;
                }
            }
        }
    }

    /// Takes the block's lock bit, checks and sets the masks, releases. Returns "all bits were set".
    #[inline]
    fn lock_check_set(block: &Block, masks: &[u64; 8]) -> bool {
        let last = &block.0[7];
        let mut old_last = Self::lock(block);
        #[cfg(test)]
        tests::stall_point();
        let mut seen = old_last & masks[7] == masks[7];
        for (word, &m) in block.0.iter().zip(masks.iter()).take(7) {
            if m == 0 {
                continue;
            }
            let w = word.load(Ordering::Relaxed);
            if w & m != m {
                seen = false;
                word.store(w | m, Ordering::Relaxed);
            }
        }
        old_last |= masks[7];
        // Release: publishes the stores above together with the unlock.
        last.store(old_last & !LOCK, Ordering::Release);
        seen
    }

    /// Writes the filter — its sizing, seed, slots and every block — for [`SlicedBloom::read_from`]
    /// (a snapshot across a restart: the seed goes with the bits, or they mean nothing). Call it
    /// when no check-and-insert runs (lock bits are cleared in the copy).
    pub fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(SNAPSHOT_MAGIC)?;
        for v in [
            self.cfg.expected_rps,
            self.cfg.slice_ms as u64,
            self.cfg.retention_ms as u64,
            self.cfg.max_window_ms as u64,
            self.cfg.target_fp.to_bits(),
            self.seed,
            self.slots.len() as u64,
            self.nblocks,
        ] {
            w.write_all(&v.to_le_bytes())?;
        }
        for slot in self.slots.iter() {
            w.write_all(&slot.slice.load(Ordering::Acquire).to_le_bytes())?;
        }
        let mut buf = Vec::with_capacity(64 * 1024);
        for b in self.blocks.as_slice() {
            for (i, word) in b.0.iter().enumerate() {
                let v = word.load(Ordering::Acquire);
                let v = if i == 7 { v & !LOCK } else { v };
                buf.extend_from_slice(&v.to_le_bytes());
            }
            if buf.len() >= 64 * 1024 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        w.write_all(&buf)
    }

    /// Reads a filter written by [`SlicedBloom::write_to`]: `Ok(None)` when it was sized
    /// differently from `cfg` (its bits cannot be reused), an error when the data is damaged.
    pub fn read_from(
        cfg: SlicedBloomConfig,
        r: &mut dyn std::io::Read,
    ) -> std::io::Result<Option<SlicedBloom>> {
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)?;
        if &magic != SNAPSHOT_MAGIC {
            return Err(bad("not a nonce filter snapshot"));
        }
        let mut word = || -> std::io::Result<u64> {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            Ok(u64::from_le_bytes(b))
        };
        let recorded = SlicedBloomConfig {
            expected_rps: word()?,
            slice_ms: word()? as i64,
            retention_ms: word()? as i64,
            max_window_ms: word()? as i64,
            target_fp: f64::from_bits(word()?),
        };
        let seed = word()?;
        let (nslots, nblocks) = (word()?, word()?);
        if recorded != cfg {
            return Ok(None);
        }
        let f = SlicedBloom::new(cfg, seed);
        if nslots != f.slots.len() as u64 || nblocks != f.nblocks {
            return Err(bad("snapshot shape does not match its own sizing"));
        }
        for slot in f.slots.iter() {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            slot.slice.store(i64::from_le_bytes(b), Ordering::Release);
        }
        let mut buf = vec![0u8; 64];
        for b in f.blocks.as_slice() {
            r.read_exact(&mut buf)?;
            for (i, word) in b.0.iter().enumerate() {
                let mut v = [0u8; 8];
                v.copy_from_slice(&buf[i * 8..i * 8 + 8]);
                let v = u64::from_le_bytes(v);
                word.store(if i == 7 { v & !LOCK } else { v }, Ordering::Relaxed);
            }
        }
        Ok(Some(f))
    }

    /// Live statistics, estimated from a sample of blocks of every live slot.
    pub fn stats(&self, now_ms: i64) -> BloomStats {
        let mut worst = (0.0f64, 0.0f64, 0.0f64); // fill, fp, entries
        let stride = (self.nblocks as usize / 1024).max(1);
        let per_word = (self.design.k / 8).max(1) as i32;
        // (ones / 64)^(k/8) for each count of ones in a word, computed once per call.
        let hit: [f64; 65] = std::array::from_fn(|ones| (ones as f64 / 64.0).powi(per_word));
        for (idx, slot) in self.slots.iter().enumerate() {
            let s = slot.slice.load(Ordering::Acquire);
            if s == NO_SLICE || now_ms >= self.expiry_of(s) {
                continue;
            }
            let (mut bits, mut fp, mut n) = (0u64, 0.0f64, 0usize);
            for b in self.blocks_of(idx).iter().step_by(stride) {
                // A query hits when each word has its k/8 probes set: Π_w (ones_w / 64)^(k/8).
                let mut block_fp = 1.0f64;
                for (i, w) in b.0.iter().enumerate() {
                    let v = w.load(Ordering::Relaxed);
                    let ones = (if i == 7 { v & !LOCK } else { v }).count_ones();
                    bits += ones as u64;
                    block_fp *= hit[ones as usize];
                }
                fp += block_fp;
                n += 1;
            }
            if n == 0 {
                continue;
            }
            let fill = bits as f64 / (n as f64 * USABLE_BITS as f64);
            let fp = fp / n as f64;
            // Invert the expected fill of a word: fill = 1 − (1 − 1/64)^(k/8 · λ).
            let lambda = if fill >= 1.0 {
                f64::INFINITY
            } else {
                (1.0 - fill).ln() / (per_word as f64 * (1.0 - 1.0 / 64.0f64).ln())
            };
            let entries = lambda * self.nblocks as f64;
            if fill > worst.0 {
                worst = (fill, fp, entries);
            }
        }
        let cap = self.cfg.capacity_per_slice();
        BloomStats {
            // What `SlicedBloomConfig::memory_bytes` computes, from the sizes made at construction
            // (that one searches the design again: milliseconds, once a second).
            memory_bytes: self.slots.len() as u64 * self.nblocks * (BLOCK_BITS as u64 / 8),
            slots: self.slots.len(),
            capacity_per_slice: cap,
            fill_ratio: worst.0,
            estimated_fp: worst.1,
            estimated_entries: worst.2,
            overloaded: worst.2 > cap as f64 * 1.1 || worst.1 > self.cfg.target_fp * 2.0,
        }
    }
}

#[cfg(test)]
mod tests;
