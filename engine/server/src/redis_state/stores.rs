//! The Redis implementations of the core's store traits. Key layout (`<p>` = `[state]
//! redis_prefix`):
//!
//! | key | type | store |
//! |---|---|---|
//! | `<p>:n:<app>:<nonce>` | string, `PX` | exact nonces (`SET NX PX`) |
//! | `<p>:nb:<app>:<slice>:<shard>` | string (bitmap), `PX` | compact nonces (Bloom slices) |
//! | `<p>:f:<fingerprint>` | string, `PX` | duplicate submissions |
//! | `<p>:g:<key>` | string (TAT), `PX` | `rate_limit` (GCRA) |
//! | `<p>:w:<key>` | hash, `PX` | `count`, reputation (sliding windows) |
//! | `<p>:d:{<hash>}:<window>:<start>` | HyperLogLog, `PX` | `distinct` |
//! | `<p>:q:{<segment>#<pool>}:h` / `:n` | set / counter, `PX` | `claim` |
//! | `<p>:q:{r#<pool>}:h` / `:n` / `:s` | set / counter / counter, `PX` | `claim`'s refills |
//!
//! Rule-supplied keys longer than 200 bytes are replaced by their 128-bit hash, so an attacker
//! who controls part of a key cannot make Redis store megabytes per request.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Instant;

use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::fingerprint::FingerprintStore;
use rampart_core::replay::nonce::{Combined, NonceStats, NonceStore, NonceVerdict, Then};
use rampart_core::store::hll::DistinctStore;
use rampart_core::store::limits::{
    window_estimate, Gcra, LimiterStore, Planned, PlannedAnswer, RefusalCache, StoredWindow,
};
use rampart_core::store::quota::{Claim, PoolView, QuotaStore, SegmentView};
use rampart_core::store::StoreError;
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64, xxh3_64_with_seed};

use super::mirror::{self, Mirror};
use super::{scripts, Redis};

pub(super) const MAX_KEY: usize = 200;

pub(super) use rampart_core::rules::REPUTATION_KEY_PREFIX as REPUTATION_PREFIX;

fn key_part(k: &str) -> Cow<'_, str> {
    if k.len() <= MAX_KEY {
        Cow::Borrowed(k)
    } else {
        Cow::Owned(format!("h:{:032x}", xxh3_128_with_seed(k.as_bytes(), 0)))
    }
}

fn invalid(msg: &str) -> StoreError {
    StoreError::Invalid(msg.into())
}

/// A value no other call of any instance uses: 8 random bytes drawn once per process, then a
/// counter. Stored by the check-and-set scripts so that a call sent twice recognises itself.
fn call_token() -> [u8; 16] {
    static PROCESS: LazyLock<[u8; 8]> = LazyLock::new(|| {
        let mut b = [0u8; 8];
        if getrandom::getrandom(&mut b).is_err() {
            // No OS randomness: the clock and the process id still differ between instances.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            b = (t ^ (u64::from(std::process::id()) << 32)).to_le_bytes();
        }
        b
    });
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&*PROCESS);
    t[8..].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    t
}

/// Sets `key` (with a TTL) if absent: true when it was (and is now set by this call). Sent again
/// after no answer, the call recognises its own write ([`scripts::SET_ONCE`]).
fn set_once(redis: &Redis, key: String, ttl_ms: i64) -> Result<bool, StoreError> {
    let token = call_token();
    let seen: i64 = redis.call_durable(&key, |c| {
        scripts::SET_ONCE
            .key(&key)
            .arg(&token[..])
            .arg(ttl_ms)
            .invoke(c)
    })?;
    Ok(seen == 0)
}

/// A layout every instance sharing a prefix must agree on (the Bloom filter's sizing, the claim
/// segments): the first instance records it with `SET NX`; a store whose layout differs refuses
/// to work (its calls fail, answered by the store's policy) instead of silently missing the
/// fleet's state. Checked at start and, if Redis was unreachable then, on the first call after.
///
/// A layout may end in ` seed=<hex>`: a value the first instance draws at random, which the others
/// adopt from the record instead of comparing it.
pub struct LayoutGuard {
    key: String,
    mine: String,
    what: &'static str,
    verified: std::sync::atomic::AtomicBool,
    mismatch: OnceLock<String>,
    /// The layout as recorded in Redis (set once verified).
    recorded: OnceLock<String>,
}

/// A layout without its drawn seed: what instances must agree on.
fn shape(layout: &str) -> &str {
    layout.split(" seed=").next().unwrap_or(layout)
}

impl LayoutGuard {
    pub fn new(key: String, mine: String, what: &'static str) -> Self {
        LayoutGuard {
            key,
            mine,
            what,
            verified: std::sync::atomic::AtomicBool::new(false),
            mismatch: OnceLock::new(),
            recorded: OnceLock::new(),
        }
    }

    /// `Ok(())` once verified; the mismatch (a permanent error) or a Redis failure otherwise.
    pub fn check(&self, redis: &Redis) -> Result<(), StoreError> {
        if self.verified.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(m) = self.mismatch.get() {
            return Err(StoreError::Unavailable(m.clone()));
        }
        let theirs: Option<String> = redis.call(|c| {
            redis::cmd("SET")
                .arg(&self.key)
                .arg(&self.mine)
                .arg("NX")
                .query::<Option<String>>(c)?;
            redis::cmd("GET").arg(&self.key).query(c)
        })?;
        let theirs = theirs.unwrap_or_else(|| self.mine.clone());
        if shape(&theirs) != shape(&self.mine) {
            let msg = format!(
                "the {} under this redis_prefix was created by instances with another layout \
                 ({}); this instance's is ({}). Every instance sharing a prefix must use the \
                 same settings; to roll out a new layout, use a new redis_prefix",
                self.what,
                shape(&theirs),
                shape(&self.mine)
            );
            tracing::error!("{msg}");
            let _ = self.mismatch.set(msg.clone());
            return Err(StoreError::Unavailable(msg));
        }
        let _ = self.recorded.set(theirs);
        self.verified.store(true, Ordering::Release);
        Ok(())
    }

    /// The seed of the recorded layout (once verified).
    fn recorded_seed(&self) -> Option<u64> {
        let (_, hex) = self.recorded.get()?.split_once(" seed=")?;
        u64::from_str_radix(hex.trim(), 16).ok()
    }

    /// At start: `Ok(true)` verified, `Ok(false)` Redis unreachable (checked later), `Err` on a
    /// mismatch (the caller refuses to start).
    pub fn check_at_start(&self, redis: &Redis) -> Result<bool, String> {
        match self.check(redis) {
            Ok(()) => Ok(true),
            Err(_) if self.mismatch.get().is_some() => {
                Err(self.mismatch.get().cloned().unwrap_or_default())
            }
            Err(_) => Ok(false),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Nonces

/// The compact mode's layout for one app: time slices by the request's own timestamp (as the
/// in-process filter, so the window-edge invariant holds the same way), each split into `shards`
/// bitmaps so that a cluster spreads one slice's traffic over its nodes. Each shard is a blocked
/// Bloom filter: a nonce picks one 1024-bit block and sets its k probe bits inside it, so the
/// script reads and writes one 128-byte range instead of k scattered bits. (A standard layout's
/// probes go to Redis as 4 arguments each, and a script's arguments and calls are most of what it
/// costs Redis.) Blocks fill unevenly, so a blocked filter needs more bits for the same
/// false-positive rate: `BloomLayout::new` sizes it with the Poisson-mixture formula of
/// [`blocked_fp`] (at 1e-6: 33.7 bits and k = 18 per entry, against 28.8 bits and k = 20 standard).
/// Smaller blocks cost Redis less per probe and more memory per nonce: 512 bits need 39 bits per
/// entry for 1e-6, 1024 bits are the smallest that keep the compact mode under a twentieth of the
/// exact mode's memory per nonce.
#[derive(Debug, Clone, Copy)]
pub struct BloomLayout {
    pub slice_ms: i64,
    pub max_window_ms: i64,
    pub retention_ms: i64,
    pub shards: u64,
    /// Entries each shard of a slice is sized for.
    pub entries_per_shard: u64,
    pub bits_per_shard: u64,
    pub k: u32,
    pub target_fp: f64,
}

/// Bits of a block: all the probes of one nonce land in one block (see [`BloomLayout`]).
pub const BLOCK_BITS: u64 = 1024;

/// The false-positive rate of a blocked Bloom filter of [`BLOCK_BITS`]-bit blocks holding on
/// average `lambda` entries per block, k probes each: Σ_x Poisson(x; λ) · (1 − (1 − 1/B)^{k·x})^k
/// (a block with x entries is a standard filter of B bits; blocks fill unevenly).
pub fn blocked_fp(lambda: f64, k: u32) -> f64 {
    let b = BLOCK_BITS as f64;
    let miss = (1.0 - 1.0 / b).ln();
    let (k, mut p, mut sum) = (k as f64, (-lambda).exp(), 0.0);
    let top = (lambda + 12.0 * lambda.sqrt() + 30.0) as u32;
    for x in 0..=top {
        if x > 0 {
            p *= lambda / x as f64;
        }
        sum += p * (1.0 - (k * x as f64 * miss).exp()).powf(k);
    }
    sum
}

/// The fewest bits per entry (to 1/16 bit) and the k that meet `target_fp` in a blocked filter.
fn blocked_design(target_fp: f64) -> (f64, u32) {
    let mut bpe = -target_fp.ln() / (std::f64::consts::LN_2 * std::f64::consts::LN_2);
    loop {
        let lambda = BLOCK_BITS as f64 / bpe;
        let best = (1..=32u32)
            .map(|k| (blocked_fp(lambda, k), k))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match best {
            Some((fp, k)) if fp <= target_fp || bpe > 512.0 => return (bpe, k),
            _ => bpe += 1.0 / 16.0,
        }
    }
}

impl BloomLayout {
    /// The layout of one app's filter (`cfg` sized for that app's rate).
    pub fn new(cfg: &SlicedBloomConfig, shards: u32) -> Self {
        let shards = shards.max(1) as u64;
        let n = cfg.capacity_per_slice().div_ceil(shards).max(16);
        let p = cfg.target_fp;
        let (bpe, k) = blocked_design(p);
        let bits = ((n as f64 * bpe).ceil() as u64).div_ceil(BLOCK_BITS) * BLOCK_BITS;
        BloomLayout {
            slice_ms: cfg.slice_ms.max(1),
            max_window_ms: cfg.max_window_ms,
            retention_ms: cfg.retention_ms,
            shards,
            entries_per_shard: n,
            bits_per_shard: bits,
            k,
            target_fp: p,
        }
    }

    /// What every instance must agree on to probe the same bits of the same keys (the probe seed
    /// is drawn at random by the first instance and kept with the record: see [`RedisNonces`]).
    pub fn descriptor(&self) -> String {
        format!(
            "v3 block={} slice_ms={} max_window_ms={} retention_ms={} shards={} bits={} k={}",
            BLOCK_BITS,
            self.slice_ms,
            self.max_window_ms,
            self.retention_ms,
            self.shards,
            self.bits_per_shard,
            self.k,
        )
    }

    pub fn bytes_per_shard(&self) -> u64 {
        self.bits_per_shard / 8
    }

    /// Server time until which a slice must be kept (as the in-process filter, plus one slice of
    /// grace for requests in flight).
    fn expiry_of(&self, slice: i64) -> i64 {
        let s = self.slice_ms;
        (slice + 1)
            .saturating_mul(s)
            .saturating_sub(self.max_window_ms)
            .saturating_add(self.retention_ms)
            .saturating_add(s)
    }

    /// Slices alive at any moment: the memory the mode holds at design load.
    pub fn live_slices(&self) -> u64 {
        ((self.retention_ms + self.slice_ms - 1) / self.slice_ms + 2) as u64
    }

    /// The bitmaps of this app alive at any moment, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.live_slices() * self.shards * self.bytes_per_shard()
    }

    /// The shard, the block's byte offset and the probes of a nonce: the shard and the block from
    /// one xxh3 hash, each of the k probe bits from an independent one (xxh3 with k seeds derived
    /// from `seed`; double hashing within a block repeats positions too often for a 1e-6
    /// target), reduced by multiply-shift. The probes are the script's argument: a (byte index,
    /// bit value) pair per distinct probe bit, in order.
    fn probes(&self, seed: u64, app: &str, nonce: &str) -> (u64, u64, Vec<u8>) {
        let mut buf = Vec::with_capacity(app.len() + 1 + nonce.len());
        buf.extend_from_slice(app.as_bytes());
        buf.push(0);
        buf.extend_from_slice(nonce.as_bytes());
        let h = xxh3_128_with_seed(&buf, seed);
        let shard = (((h >> 64) as u64 as u128 * self.shards as u128) >> 64) as u64;
        let blocks = (self.bits_per_shard / BLOCK_BITS) as u128;
        let block = ((h as u64 as u128 * blocks) >> 64) as u64;
        let mut bits: Vec<u16> = (1..=self.k as u64)
            .map(|i| {
                let hi = xxh3_64_with_seed(
                    &buf,
                    seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                );
                ((hi as u128 * BLOCK_BITS as u128) >> 64) as u16
            })
            .collect();
        bits.sort_unstable();
        bits.dedup();
        let probes = bits
            .iter()
            .flat_map(|&b| [(b / 8) as u8, 1u8 << (b % 8)])
            .collect();
        (shard, block * BLOCK_BITS / 8, probes)
    }
}

pub enum NonceMode {
    /// `SET NX PX`: no false positives, ~100 B per live nonce.
    Exact,
    /// One compact filter per app, each with its own layout.
    Bloom(Vec<(String, BloomLayout)>),
}

/// One app's compact filter: its layout, the record every instance checks it against, and the
/// probe seed adopted from that record.
struct AppFilter {
    layout: BloomLayout,
    guard: LayoutGuard,
    seed: OnceLock<u64>,
}

impl AppFilter {
    /// The seed, once the layout is verified (the record's, drawn by the first instance).
    fn seed(&self, redis: &Redis) -> Result<u64, StoreError> {
        self.guard.check(redis)?;
        Ok(*self
            .seed
            .get_or_init(|| self.guard.recorded_seed().unwrap_or_default()))
    }
}

/// A compact-mode nonce's place (see [`RedisNonces::bloom_probe`]).
struct BloomProbe {
    key: String,
    ttl: i64,
    bytes: u64,
    /// The nonce's block (byte offset) and its probes (see [`BloomLayout::probes`]).
    block: u64,
    probes: Vec<u8>,
}

/// Nonces in Redis, exact or compact.
pub struct RedisNonces {
    redis: Arc<Redis>,
    /// The compact filters by app (empty in exact mode).
    filters: std::collections::HashMap<String, AppFilter>,
    retention_ms: i64,
    /// Added to every expiry: engine instances' clocks differ by up to this much.
    margin_ms: i64,
    /// How long a compact-mode token key outlives its call: long enough for a second send.
    token_ttl_ms: i64,
    stats_probe: AtomicU64,
    last_stats: Mutex<NonceStats>,
}

/// A random 64-bit probe seed, proposed by an instance that may be the first to record a layout.
fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::getrandom(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => xxh3_64(&call_token()),
    }
}

impl RedisNonces {
    pub fn new(redis: Arc<Redis>, mode: NonceMode, retention_ms: i64, margin_ms: i64) -> Self {
        let filters = match mode {
            NonceMode::Exact => Default::default(),
            NonceMode::Bloom(apps) => apps
                .into_iter()
                .map(|(app, layout)| {
                    let guard = LayoutGuard::new(
                        format!("{}:nb:layout:{app}", redis.prefix()),
                        format!("{} seed={:016x}", layout.descriptor(), random_seed()),
                        "compact nonce filter",
                    );
                    let f = AppFilter {
                        layout,
                        guard,
                        seed: OnceLock::new(),
                    };
                    (app, f)
                })
                .collect(),
        };
        // A second send leaves one timeout (plus a connect) after the first: twice that, and a
        // margin, covers the gap between their runs.
        let token_ttl_ms = 2 * redis.timeout().as_millis() as i64 + 100;
        RedisNonces {
            redis,
            filters,
            retention_ms,
            margin_ms,
            token_ttl_ms,
            stats_probe: AtomicU64::new(0),
            last_stats: Mutex::new(NonceStats::default()),
        }
    }

    /// See [`LayoutGuard::check_at_start`] (every app's filter).
    pub fn check_layout_at_start(&self) -> Result<bool, String> {
        let mut all = true;
        for f in self.filters.values() {
            all &= f.guard.check_at_start(&self.redis)?;
        }
        Ok(all)
    }

    /// An exact nonce's TTL: live until ts − W + retention (≥ ts + W), as the in-process exact
    /// store, plus the clock margin; ≤ 0 when its timestamp can no longer pass.
    fn exact_ttl(&self, ts_ms: i64, window_ms: i64, now_ms: i64) -> i64 {
        let expires = ts_ms
            .saturating_sub(window_ms)
            .saturating_add(self.retention_ms)
            .saturating_add(1);
        expires - now_ms + self.margin_ms
    }

    /// The verdict of a script that answered "new", sent `sent` ago with a nonce TTL of `ttl_ms`.
    ///
    /// The TTL was computed from the decision's clock reading, taken before the call; the call
    /// then waited (a paused or slow Redis, a coalesced write in flight, a second send) and Redis
    /// ran the script some time later. If that was after the moment a record of the same nonce written
    /// earlier would have expired (the TTL less the margin that covers another instance's
    /// clock), "new" may only mean the record was gone: a replay near the end of its window
    /// would pass. So the answer stands only when the whole call took less than that; otherwise
    /// the timestamp is judged out of range (`TIMESTAMP_SKEW`), as it would be had the request
    /// arrived when Redis ran the script. The duration is counted from the send: the steps
    /// between the clock reading and the send run in process (microseconds), and a thread
    /// stalled there is the one delay this does not see.
    fn new_unless_late(&self, ttl_ms: i64, sent: Instant) -> NonceVerdict {
        let took = i64::try_from(sent.elapsed().as_millis()).unwrap_or(i64::MAX);
        if took < ttl_ms - self.margin_ms {
            NonceVerdict::Fresh
        } else {
            NonceVerdict::OutOfRange
        }
    }

    /// Where a compact-mode nonce lives: its bitmap, the bitmap's TTL and size, the probe bits;
    /// `None` when its slice has expired (out of range).
    fn bloom_probe(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        now_ms: i64,
    ) -> Result<Option<BloomProbe>, StoreError> {
        let f = self
            .filters
            .get(app)
            .ok_or_else(|| invalid("no compact nonce filter for this app"))?;
        let seed = f.seed(&self.redis)?;
        let l = &f.layout;
        let slice = ts_ms.div_euclid(l.slice_ms);
        let ttl = l.expiry_of(slice) - now_ms + self.margin_ms;
        if ttl <= 0 {
            return Ok(None);
        }
        let (shard, block, probes) = l.probes(seed, app, nonce);
        Ok(Some(BloomProbe {
            // One hash tag for the bitmap and its token keys: one slot, one script.
            key: format!("{}:nb:{{{app}:{slice}:{shard}}}", self.redis.prefix()),
            ttl,
            bytes: l.bytes_per_shard(),
            block,
            probes,
        }))
    }

    /// The compact filters' bitmaps alive at any moment, in bytes (all apps).
    pub fn memory_bytes(&self) -> u64 {
        self.filters.values().map(|f| f.layout.memory_bytes()).sum()
    }
}

impl NonceStore for RedisNonces {
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError> {
        let p = self.redis.prefix();
        if self.filters.is_empty() {
            let ttl = self.exact_ttl(ts_ms, window_ms, now_ms);
            if ttl <= 0 {
                return Ok(NonceVerdict::OutOfRange);
            }
            let key = format!("{p}:n:{app}:{nonce}");
            let sent = Instant::now();
            return Ok(if set_once(&self.redis, key, ttl)? {
                self.new_unless_late(ttl, sent)
            } else {
                NonceVerdict::Replay
            });
        }
        let Some(probe) = self.bloom_probe(app, nonce, ts_ms, now_ms)? else {
            return Ok(NonceVerdict::OutOfRange);
        };
        let token = format!("{}:t:{}", probe.key, hex::encode(call_token()));
        let token_ttl = self.token_ttl_ms;
        let sent = Instant::now();
        let seen: i64 = self.redis.call_durable(&probe.key, |c| {
            let mut inv = scripts::NONCE_BLOOM.key(&probe.key);
            inv.key(&token)
                .arg(probe.ttl)
                .arg(probe.bytes)
                .arg(token_ttl)
                .arg(probe.block)
                .arg(&probe.probes[..]);
            inv.invoke(c)
        })?;
        Ok(if seen == 1 {
            NonceVerdict::Replay
        } else {
            self.new_unless_late(probe.ttl, sent)
        })
    }

    /// One node only: the nonce and the fingerprint keys hash to different cluster slots, so on
    /// a cluster they stay two calls. The script of
    /// [`check_and_insert_limits`](NonceStore::check_and_insert_limits), with no limit.
    fn check_and_insert_then(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
        then: Then,
    ) -> Option<Combined> {
        self.check_and_insert_limits(app, nonce, ts_ms, window_ms, now_ms, Some(then), &[])
            .map(|(combined, _)| combined)
    }

    fn batches_limits(&self) -> bool {
        !self.redis.is_cluster()
    }

    /// One node only (the limits' keys live in other slots than the nonce's on a cluster).
    fn check_and_insert_limits(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
        then: Option<Then>,
        limits: &[Planned],
    ) -> Option<(Combined, Vec<PlannedAnswer>)> {
        if self.redis.is_cluster() {
            return None;
        }
        let p = self.redis.prefix();
        let token = call_token();
        let fp = then.map(|t| (format!("{p}:f:{:032x}", t.fingerprint), t.window_ms.max(1)));
        // Each call's keys and its three arguments (kind, then T and τ, or the item and the TTL).
        let mut limit_keys: Vec<String> = Vec::with_capacity(limits.len() + 1);
        let mut limit_args: Vec<(&str, String, String)> = Vec::with_capacity(limits.len());
        for l in limits {
            match l {
                Planned::RateLimit(l) => {
                    limit_keys.push(format!("{p}:g:{}", key_part(&l.key)));
                    let t = 1000.0 / l.rate_per_sec;
                    limit_args.push(("g", t.to_string(), (t * l.burst as f64).to_string()));
                }
                Planned::Distinct {
                    key,
                    item,
                    window_ms,
                } => {
                    let (cur, prev, ttl) = distinct_keys(p, key, now_ms, *window_ms);
                    limit_keys.push(cur);
                    limit_keys.push(prev);
                    limit_args.push(("d", item.clone(), ttl.to_string()));
                }
            }
        }
        // (mode, nonce key, token key, nonce TTL, bitmap bytes, block and probes)
        let (mode, key, token_key, ttl, bytes, bloom) = if self.filters.is_empty() {
            let ttl = self.exact_ttl(ts_ms, window_ms, now_ms);
            if ttl <= 0 {
                return Some(((Ok(NonceVerdict::OutOfRange), None), Vec::new()));
            }
            let key = format!("{p}:n:{app}:{nonce}");
            ("e", key.clone(), key, ttl, 0, None)
        } else {
            let probe = match self.bloom_probe(app, nonce, ts_ms, now_ms) {
                Ok(Some(probe)) => probe,
                Ok(None) => return Some(((Ok(NonceVerdict::OutOfRange), None), Vec::new())),
                Err(e) => return Some(((Err(e.clone()), fp.map(|_| Err(e))), Vec::new())),
            };
            let token_key = format!("{}:t:{}", probe.key, hex::encode(token));
            (
                "b",
                probe.key,
                token_key,
                probe.ttl,
                probe.bytes,
                Some((probe.block, probe.probes)),
            )
        };
        let fp_key = fp.as_ref().map_or(key.as_str(), |(k, _)| k.as_str());
        let mut keys = vec![key.as_str(), token_key.as_str(), fp_key];
        keys.extend(limit_keys.iter().map(String::as_str));
        let script = &scripts::ANTI_REPLAY_LIMITS;
        let mut cmd = super::evalsha(script, &keys);
        cmd.arg(mode)
            .arg(&token[..])
            .arg(ttl)
            .arg(bytes)
            .arg(self.token_ttl_ms)
            .arg(fp.as_ref().map_or(0, |(_, ttl)| *ttl))
            .arg(now_ms)
            .arg(limits.len());
        for (kind, a, b) in &limit_args {
            cmd.arg(*kind).arg(a).arg(b);
        }
        if let Some((block, probes)) = &bloom {
            cmd.arg(*block).arg(&probes[..]);
        }
        // In a write shared with other decisions' scripts when coalescing (`combine.rs`).
        let sent = Instant::now();
        let answer: Result<Vec<i64>, StoreError> = self
            .redis
            .call_script(&key, script, &cmd)
            .and_then(|v| redis::from_redis_value(v).map_err(super::unavailable));
        let asked = fp.is_some();
        Some(match answer {
            Ok(v) if v.first() == Some(&1) => ((Ok(NonceVerdict::Replay), None), Vec::new()),
            // Judged too late to mean "new" (the limits it took are spent: the request is refused
            // at the window step, as a late one would be).
            Ok(_) if self.new_unless_late(ttl, sent) == NonceVerdict::OutOfRange => {
                ((Ok(NonceVerdict::OutOfRange), None), Vec::new())
            }
            Ok(v) => {
                let seen = v.get(1).copied().unwrap_or(-1);
                let spent = v
                    .get(2..)
                    .unwrap_or_default()
                    .chunks_exact(2)
                    .zip(limits)
                    .map(|(a, l)| match l {
                        Planned::RateLimit(_) => PlannedAnswer::RateLimit(Gcra {
                            allowed: a[0] == 1,
                            retry_after_ms: a[1].max(0) as u64,
                        }),
                        Planned::Distinct { .. } => PlannedAnswer::Distinct(a[1].max(0) as u64),
                    })
                    .collect();
                (
                    (Ok(NonceVerdict::Fresh), asked.then_some(Ok(seen != 1))),
                    spent,
                )
            }
            Err(e) => ((Err(e.clone()), asked.then_some(Err(e))), Vec::new()),
        })
    }

    fn maintain(&self, _now_ms: i64) {
        // Expiry does the housekeeping: every key carries its own PX.
    }

    fn stats(&self, _now_ms: i64) -> NonceStats {
        if self.filters.is_empty() {
            return NonceStats {
                mode: "redis-exact",
                ..Default::default()
            };
        }
        // The fill comes from `sample` (BITCOUNT of a recent slice), refreshed in the background.
        let mut st = self
            .last_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        st.mode = "redis-bloom";
        st.memory_bytes = self.memory_bytes();
        st
    }
}

impl RedisNonces {
    /// Refreshes the sampled fill of `app`'s filter (called by the maintenance thread).
    pub fn sample(&self, app: &str, now_ms: i64) {
        let Some(f) = self.filters.get(app) else {
            return;
        };
        let l = &f.layout;
        let slice = (now_ms - l.slice_ms).div_euclid(l.slice_ms);
        let shard = self.stats_probe.fetch_add(1, Ordering::Relaxed) % l.shards;
        let key = format!("{}:nb:{{{app}:{slice}:{shard}}}", self.redis.prefix());
        let Ok(ones) = self
            .redis
            .call(|c| redis::cmd("BITCOUNT").arg(&key).query::<u64>(c))
        else {
            return;
        };
        let m = l.bits_per_shard as f64;
        let fill = ones as f64 / m;
        let k = l.k as f64;
        let entries = if fill < 1.0 {
            -(m / k) * (1.0 - fill).ln()
        } else {
            f64::INFINITY
        };
        let fp = if entries.is_finite() {
            blocked_fp(entries / (m / BLOCK_BITS as f64), l.k).min(1.0)
        } else {
            1.0
        };
        let mut st = self.last_stats.lock().unwrap_or_else(|e| e.into_inner());
        st.fill_ratio = fill;
        st.entries = entries * l.shards as f64;
        st.estimated_fp = fp;
        st.overloaded = entries > l.entries_per_shard as f64 * 1.1 || fp > l.target_fp * 2.0;
    }
}

// ---------------------------------------------------------------------------------------------
// Fingerprints

pub struct RedisFingerprints {
    redis: Arc<Redis>,
}

impl RedisFingerprints {
    pub fn new(redis: Arc<Redis>) -> Self {
        RedisFingerprints { redis }
    }
}

impl FingerprintStore for RedisFingerprints {
    fn insert_if_absent(
        &self,
        _app: &str,
        fp: u128,
        window_ms: i64,
        _now_ms: i64,
    ) -> Result<bool, StoreError> {
        let key = format!("{}:f:{fp:032x}", self.redis.prefix());
        set_once(&self.redis, key, window_ms.max(1))
    }

    fn maintain(&self, _now_ms: i64) {}

    fn len(&self) -> usize {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Rate limits and counters

pub struct RedisLimiter {
    redis: Arc<Redis>,
    /// Keys over their limit until their refusal ends: refused without a call meanwhile.
    refusals: RefusalCache,
    /// Every client's reputation, kept current by pub/sub (one node only; `None` on a cluster or
    /// with `[state] reputation_copy = false`).
    mirror: Option<Arc<Mirror>>,
    /// Where reputation writes publish their new state, on one node whether or not this instance
    /// keeps a copy (the others may).
    channel: Option<String>,
}

/// Most refusals remembered at once (≈ 100 bytes each).
const REFUSALS_CACHED: usize = 100_000;

impl RedisLimiter {
    /// `reputation_copy`: keep every client's reputation in this instance (one Redis node only).
    pub fn new(redis: Arc<Redis>, reputation_copy: bool) -> Self {
        let mirror = (reputation_copy && !redis.is_cluster()).then(|| {
            let m = Mirror::new(redis.prefix());
            m.start(&redis);
            m
        });
        let channel = (!redis.is_cluster()).then(|| mirror::channel(redis.prefix()));
        RedisLimiter {
            redis,
            refusals: RefusalCache::new(REFUSALS_CACHED),
            mirror,
            channel,
        }
    }

    fn window_key(&self, key: &str) -> String {
        format!("{}:w:{}", self.redis.prefix(), key_part(key))
    }

    /// The channel a write of `key` publishes on (a reputation key on one node).
    fn channel_of(&self, key: &str) -> Option<String> {
        self.channel.clone().filter(|_| mirror::mirrored(key))
    }

    /// Whether reputation reads are answered in process (the copy is complete and current).
    pub fn reputation_copy_ready(&self) -> bool {
        self.mirror.as_ref().is_some_and(|m| m.ready())
    }
}

/// Adds `n` (≠ 0) to a sliding-window counter; the script answers its estimate (one atomic step)
/// and, given a channel, publishes the counter's new state on it.
fn window_add(
    key: &str,
    now_ms: i64,
    window_ms: i64,
    n: i64,
    channel: Option<&str>,
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::WINDOW.key(key);
    inv.arg(now_ms).arg(window_ms).arg(n);
    if let Some(ch) = channel {
        inv.arg(ch);
    }
    inv
}

/// Reads a sliding-window counter without changing it: a plain `HMGET` of its four numbers, with
/// the estimate computed here (the same arithmetic as the in-process limiter) — no script.
fn window_read(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg("s").arg("w").arg("c").arg("p");
    cmd
}

/// The stored window from an `HMGET s w c p` answer (absent or unreadable: nothing stored).
pub(super) fn stored_window(fields: &[Option<String>]) -> Option<StoredWindow> {
    // The script writes Lua numbers: integers, possibly printed as floats.
    let num = |i: usize| -> Option<i64> {
        let v = fields.get(i)?.as_deref()?;
        v.parse::<i64>().ok().or_else(|| {
            v.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(|f| f as i64)
        })
    };
    Some(StoredWindow {
        start: num(0)?,
        window: num(1)?,
        cur: num(2).unwrap_or(0),
        prev: num(3).unwrap_or(0),
    })
}

impl LimiterStore for RedisLimiter {
    fn gcra(
        &self,
        key: &str,
        now_ms: i64,
        rate_per_sec: f64,
        burst: u32,
    ) -> Result<Gcra, StoreError> {
        if !(rate_per_sec > 0.0 && rate_per_sec.is_finite()) || burst == 0 {
            return Err(invalid(
                "rate_limit needs a positive rate and a burst of at least 1",
            ));
        }
        if let Some(refused) = self.refusals.check(key, now_ms, rate_per_sec, burst) {
            self.redis.counters().refusals_cached.inc();
            return Ok(refused);
        }
        let t = 1000.0 / rate_per_sec;
        let tau = t * burst as f64;
        let stored = format!("{}:g:{}", self.redis.prefix(), key_part(key));
        let (allowed, retry): (i64, i64) = self.redis.call(move |c| {
            scripts::GCRA
                .key(&stored)
                .arg(now_ms)
                .arg(t)
                .arg(tau)
                .invoke(c)
        })?;
        let answer = Gcra {
            allowed: allowed == 1,
            retry_after_ms: retry.max(0) as u64,
        };
        self.refusals
            .remember(key, now_ms, rate_per_sec, burst, answer);
        Ok(answer)
    }

    fn incr(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) -> Result<i64, StoreError> {
        if window_ms <= 0 {
            return Err(invalid("counter windows must be positive"));
        }
        if n == 0 {
            return self.get(key, now_ms, window_ms);
        }
        let channel = self.channel_of(key);
        let key = self.window_key(key);
        self.redis
            .call(move |c| window_add(&key, now_ms, window_ms, n, channel.as_deref()).invoke(c))
    }

    fn get(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<i64, StoreError> {
        if window_ms <= 0 {
            return Err(invalid("counter windows must be positive"));
        }
        // Always Redis, copy or not: a single read is the operator's view and the rule helper
        // `reputation(kind, value)`; the per-request batch below is what the copy is for.
        let key = self.window_key(key);
        let fields: Vec<Option<String>> = self.redis.call(move |c| window_read(&key).query(c))?;
        Ok(window_estimate(stored_window(&fields), now_ms, window_ms))
    }

    fn get_many(
        &self,
        keys: &[String],
        now_ms: i64,
        window_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if window_ms <= 0 {
            return Err(invalid("counter windows must be positive"));
        }
        if let Some(m) = &self.mirror {
            if let Some(v) = m.read(keys, now_ms, window_ms) {
                self.redis.counters().reputation_reads_copied.inc();
                return Ok(v);
            }
        }
        let cmds: Vec<redis::Cmd> = keys
            .iter()
            .map(|k| window_read(&self.window_key(k)))
            .collect();
        let answers: Vec<Vec<Option<String>>> =
            self.redis.call(move |c| c.query_all(cmds.clone()))?;
        Ok(answers
            .iter()
            .map(|fields| window_estimate(stored_window(fields), now_ms, window_ms))
            .collect())
    }

    fn incr_detached(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) {
        if window_ms <= 0 || n == 0 {
            return;
        }
        let channel = self.channel_of(key);
        let key = self.window_key(key);
        self.redis.send(move |mut c| async move {
            window_add(&key, now_ms, window_ms, n, channel.as_deref())
                .invoke_async::<i64>(&mut c)
                .await
                .map(|_| ())
        });
    }

    fn shared(&self) -> bool {
        true
    }

    fn forget_cached(&self, key: &str) {
        self.refusals.forget(key);
    }

    fn refusal_cached(&self, key: &str, now_ms: i64, rate_per_sec: f64, burst: u32) -> bool {
        self.refusals.peek(key, now_ms, rate_per_sec, burst)
    }

    fn learn_answer(&self, key: &str, now_ms: i64, rate_per_sec: f64, burst: u32, g: Gcra) {
        self.refusals.remember(key, now_ms, rate_per_sec, burst, g);
    }

    fn gcra_tat(&self, key: &str, now_ms: i64) -> Result<Option<f64>, StoreError> {
        let stored = format!("{}:g:{}", self.redis.prefix(), key_part(key));
        let tat: Option<String> = self
            .redis
            .call(move |c| redis::cmd("GET").arg(&stored).query(c))?;
        Ok(tat
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|&t| t >= now_ms as f64))
    }

    fn reset(&self, key: &str) -> Result<bool, StoreError> {
        self.refusals.forget(key);
        let part = key_part(key);
        let (g, w) = (
            format!("{}:g:{part}", self.redis.prefix()),
            self.window_key(key),
        );
        let channel = self.channel_of(key);
        // Two keys of different slots on a cluster: one DEL each.
        let removed: i64 = self.redis.call(move |c| {
            let a: i64 = redis::cmd("DEL").arg(&g).query(c)?;
            let b: i64 = redis::cmd("DEL").arg(&w).query(c)?;
            if let Some(ch) = &channel {
                // The copies forget it too (a message with no numbers is a deletion).
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(ch)
                    .arg(format!("{w}\n"))
                    .query(c)?;
            }
            Ok(a + b)
        })?;
        Ok(removed > 0)
    }

    fn maintain(&self, now_ms: i64) {
        self.refusals.purge(now_ms);
    }

    fn len(&self) -> usize {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Distinct counts

pub struct RedisDistinct {
    redis: Arc<Redis>,
}

impl RedisDistinct {
    pub fn new(redis: Arc<Redis>) -> Self {
        RedisDistinct { redis }
    }

    fn run(&self, key: &str, item: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError> {
        if window_ms <= 0 {
            return Err(invalid("distinct windows must be positive"));
        }
        let (cur, prev, ttl) = distinct_keys(self.redis.prefix(), key, now_ms, window_ms);
        let item = item.to_string();
        self.redis.call(move |c| {
            scripts::DISTINCT
                .key(&cur)
                .key(&prev)
                .arg(&item)
                .arg(ttl)
                .invoke(c)
        })
    }
}

/// A distinct count's current and previous window keys and the current one's TTL (ms). The tag
/// is a hash of the key: both windows in one slot, whatever characters the key has.
fn distinct_keys(prefix: &str, key: &str, now_ms: i64, window_ms: i64) -> (String, String, i64) {
    let start = now_ms.div_euclid(window_ms) * window_ms;
    let tag = format!(
        "{prefix}:d:{{{:016x}}}:{window_ms}",
        xxh3_64(key.as_bytes())
    );
    (
        format!("{tag}:{start}"),
        format!("{tag}:{}", start - window_ms),
        start + 2 * window_ms - now_ms + 1,
    )
}

impl DistinctStore for RedisDistinct {
    fn add(&self, key: &str, item: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError> {
        self.run(key, item, now_ms, window_ms)
    }

    fn count(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<u64, StoreError> {
        self.run(key, "", now_ms, window_ms)
    }

    fn maintain(&self, _now_ms: i64) {}

    fn len(&self) -> usize {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Quotas

/// Virtual nodes per segment on the consistent-hash ring.
const VNODES: u64 = 64;

/// Claims in Redis. A pool's stock is split into `segments` (each with its own holders set and
/// counter, in its own slot, so one hot prize spreads over the cluster's nodes). A user's home
/// segment is found on a consistent-hash ring with virtual nodes (so the mapping is even and
/// stable); when it is exhausted the claim walks on to the next segments of the ring, always in
/// the same order for that user.
///
/// - **Never oversold**: each segment grants at most its share, atomically, and the shares add up
///   to the stock.
/// - **Never twice per user**: a user's claims always visit the same segments in the same order,
///   and a segment is only passed when it is exhausted — which it stays while the stock does not
///   grow — so a second claim meets the first one's holder set. (Raising a live pool's stock in
///   the rule with more than one segment can re-open a segment a user has walked past; raise it
///   only between campaigns, or refill.)
/// - **Refills never re-open a segment**: an operator's refill ([`QuotaStore::refill`]) goes to
///   a segment of its own, `r`, with its stock in a counter (`:s`), that every user's walk ends
///   on. Its holders were all refused by every regular segment, which stay exhausted, so a
///   second claim walks to `r` again and meets its holder set; and a user who holds a claim in a
///   regular segment stops there. The cost: a claim that finds every regular segment exhausted
///   asks `r` too (one more round trip, only once the rule's stock is gone).
pub struct RedisQuotas {
    redis: Arc<Redis>,
    segments: u64,
    ring: Vec<(u64, u64)>,
    ttl_ms: i64,
    guard: LayoutGuard,
}

impl RedisQuotas {
    pub fn new(redis: Arc<Redis>, segments: u32, ttl_ms: i64) -> Self {
        let segments = segments.max(1) as u64;
        let mut ring: Vec<(u64, u64)> = (0..segments)
            .flat_map(|s| {
                (0..VNODES).map(move |v| {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&s.to_le_bytes());
                    b[8..].copy_from_slice(&v.to_le_bytes());
                    (xxh3_64(&b), s)
                })
            })
            .collect();
        ring.sort_unstable();
        let guard = LayoutGuard::new(
            format!("{}:q:layout", redis.prefix()),
            format!("v1 segments={segments} vnodes={VNODES}"),
            "claim store",
        );
        RedisQuotas {
            redis,
            segments,
            ring,
            ttl_ms,
            guard,
        }
    }

    /// See [`LayoutGuard::check_at_start`].
    pub fn check_layout_at_start(&self) -> Result<bool, String> {
        self.guard.check_at_start(&self.redis)
    }

    /// The segments a user visits, in order: home first, then the ring's next distinct ones.
    fn walk(&self, user: &str) -> Vec<u64> {
        if self.segments == 1 {
            return vec![0];
        }
        let h = xxh3_64(user.as_bytes());
        let start = self.ring.partition_point(|(p, _)| *p < h);
        let mut out = Vec::with_capacity(self.segments as usize);
        for i in 0..self.ring.len() {
            let s = self.ring[(start + i) % self.ring.len()].1;
            if !out.contains(&s) {
                out.push(s);
                if out.len() as u64 == self.segments {
                    break;
                }
            }
        }
        out
    }

    fn share(&self, stock: u64, seg: u64) -> u64 {
        stock / self.segments + u64::from(seg < stock % self.segments)
    }

    fn keys(&self, pool: &str, seg: u64) -> (String, String) {
        let base = format!("{}:q:{{{seg}#{}}}", self.redis.prefix(), key_part(pool));
        (format!("{base}:h"), format!("{base}:n"))
    }

    /// The refill segment's holders, granted counter and stock.
    fn refill_keys(&self, pool: &str) -> [String; 3] {
        let base = format!("{}:q:{{r#{}}}", self.redis.prefix(), key_part(pool));
        [
            format!("{base}:h"),
            format!("{base}:n"),
            format!("{base}:s"),
        ]
    }

    /// The set of pools a user claimed in (`held`): written after each grant, off the decision's
    /// path, for operators. It is a separate key (another slot than the pools' holder sets), so
    /// it is not written atomically with the claim; `held` checks every entry against the
    /// pool's holder sets before listing it.
    fn user_key(&self, user: &str) -> String {
        format!("{}:qu:{{{}}}", self.redis.prefix(), key_part(user))
    }

    fn run(&self, pool: &str, user: &str, stock: u64, peek: bool) -> Result<Claim, StoreError> {
        let claim = self.walk_claim(pool, user, stock, peek)?;
        if !peek && matches!(claim, Claim::Granted { .. }) {
            let (key, pool, ttl) = (self.user_key(user), pool.to_string(), self.ttl_ms);
            self.redis.send(move |mut c| async move {
                redis::pipe()
                    .sadd(&key, &pool)
                    .ignore()
                    .pexpire(&key, ttl)
                    .ignore()
                    .query_async::<()>(&mut c)
                    .await
            });
        }
        Ok(claim)
    }

    fn walk_claim(
        &self,
        pool: &str,
        user: &str,
        stock: u64,
        peek: bool,
    ) -> Result<Claim, StoreError> {
        if pool.is_empty() || user.is_empty() {
            return Err(invalid("claim needs a pool and a user"));
        }
        self.guard.check(&self.redis)?;
        for seg in self.walk(user) {
            let share = self.share(stock, seg);
            if share == 0 {
                continue;
            }
            let (holders, granted) = self.keys(pool, seg);
            let user = key_part(user).into_owned();
            let ttl = self.ttl_ms;
            let (status, remaining): (i64, i64) = self.redis.call(move |c| {
                scripts::CLAIM
                    .key(&holders)
                    .key(&granted)
                    .arg(&user)
                    .arg(share)
                    .arg(ttl)
                    .arg(if peek { 1 } else { 0 })
                    .invoke(c)
            })?;
            // Exhausted: walk on. (Never skip a segment without asking it: the user may hold a
            // claim there, and only its script knows.)
            if let Some(claim) = claim_answer(status, remaining) {
                return Ok(claim);
            }
        }
        // Every regular segment is exhausted: the refills' segment, last for every user.
        let [holders, granted, refilled] = self.refill_keys(pool);
        let user = key_part(user).into_owned();
        let ttl = self.ttl_ms;
        let (status, remaining): (i64, i64) = self.redis.call(move |c| {
            scripts::CLAIM_REFILL
                .key(&holders)
                .key(&granted)
                .key(&refilled)
                .arg(&user)
                .arg(ttl)
                .arg(if peek { 1 } else { 0 })
                .invoke(c)
        })?;
        Ok(claim_answer(status, remaining).unwrap_or(Claim::Exhausted))
    }

    /// The claims granted by each of a pool's regular segments, then by its refill segment.
    fn granted_keys(&self, pool: &str) -> Vec<String> {
        let mut keys: Vec<String> = (0..self.segments).map(|s| self.keys(pool, s).1).collect();
        let [_, granted, _] = self.refill_keys(pool);
        keys.push(granted);
        keys
    }

    /// The counters at `keys` (0 where absent): one GET each, as they live in different slots,
    /// sent together.
    fn counts(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        let cmds: Vec<redis::Cmd> = keys
            .iter()
            .map(|k| {
                let mut cmd = redis::cmd("GET");
                cmd.arg(k);
                cmd
            })
            .collect();
        Ok(self
            .redis
            .call(move |c| c.query_all::<Option<u64>>(cmds.clone()))?
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }
}

/// A claim script's answer (`CLAIM`, `CLAIM_REFILL`): granted, a duplicate, or `None` when the
/// segment is exhausted.
fn claim_answer(status: i64, remaining: i64) -> Option<Claim> {
    match status {
        0 => Some(Claim::Granted {
            remaining: remaining.max(0) as u64,
        }),
        1 => Some(Claim::Duplicate),
        _ => None,
    }
}

impl QuotaStore for RedisQuotas {
    fn claim(&self, pool: &str, user: &str, stock: u64, _now_ms: i64) -> Result<Claim, StoreError> {
        self.run(pool, user, stock, false)
    }

    fn peek(&self, pool: &str, user: &str, stock: u64) -> Result<Claim, StoreError> {
        self.run(pool, user, stock, true)
    }

    fn claimed(&self, pool: &str) -> Result<u64, StoreError> {
        if pool.is_empty() {
            return Err(invalid("claimed needs a pool"));
        }
        // The granted counters only: the refill stock is not needed on a decision's path.
        Ok(self.counts(&self.granted_keys(pool))?.iter().sum())
    }

    fn refill(&self, pool: &str, add: u64, _now_ms: i64) -> Result<u64, StoreError> {
        if pool.is_empty() {
            return Err(invalid("refill needs a pool"));
        }
        let [holders, granted, refilled] = self.refill_keys(pool);
        let ttl = self.ttl_ms;
        self.redis.call(move |c| {
            scripts::REFILL
                .key(&holders)
                .key(&granted)
                .key(&refilled)
                .arg(add)
                .arg(ttl)
                .invoke(c)
        })
    }

    fn view(&self, pool: &str) -> Result<PoolView, StoreError> {
        if pool.is_empty() {
            return Err(invalid("a pool's view needs a pool"));
        }
        let [_, _, refilled] = self.refill_keys(pool);
        let mut keys = self.granted_keys(pool);
        keys.push(refilled);
        let mut counts = self.counts(&keys)?;
        let refilled = counts.pop().unwrap_or(0);
        let segments: Vec<SegmentView> = counts
            .iter()
            .enumerate()
            .map(|(i, &claimed)| SegmentView {
                segment: if i as u64 == self.segments {
                    "refill".into()
                } else {
                    i.to_string()
                },
                claimed,
            })
            .collect();
        Ok(PoolView {
            claimed: counts.iter().sum(),
            refilled,
            segments,
        })
    }

    fn held(&self, user: &str, max: usize) -> Result<Vec<String>, StoreError> {
        if user.is_empty() {
            return Err(invalid("held needs a user"));
        }
        let key = self.user_key(user);
        let mut pools: Vec<String> = self
            .redis
            .call(move |c| redis::cmd("SMEMBERS").arg(&key).query(c))?;
        pools.sort_unstable();
        // Each entry checked against the pool's holder sets (a pool that expired, or a claim
        // an operator released, is not listed).
        let member = key_part(user).into_owned();
        let mut out = Vec::new();
        for pool in pools {
            if out.len() == max {
                break;
            }
            let mut holders: Vec<String> =
                (0..self.segments).map(|s| self.keys(&pool, s).0).collect();
            holders.push(self.refill_keys(&pool)[0].clone());
            let cmds: Vec<redis::Cmd> = holders
                .iter()
                .map(|h| {
                    let mut c = redis::cmd("SISMEMBER");
                    c.arg(h).arg(&member);
                    c
                })
                .collect();
            let found: Vec<i64> = self.redis.call(move |c| c.query_all::<i64>(cmds.clone()))?;
            if found.contains(&1) {
                out.push(pool);
            }
        }
        Ok(out)
    }

    fn shared(&self) -> bool {
        true
    }

    fn maintain(&self, _now_ms: i64) {}

    fn len(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(rps: u64, target_fp: f64) -> BloomLayout {
        let cfg = SlicedBloomConfig {
            expected_rps: rps,
            slice_ms: 1000,
            retention_ms: 10_000,
            max_window_ms: 5000,
            target_fp,
        };
        BloomLayout::new(&cfg, 1)
    }

    #[test]
    fn the_blocked_layout_is_sized_for_its_target() {
        let (bpe, k) = blocked_design(1e-6);
        assert!(
            (32.0..36.0).contains(&bpe) && (13..=20).contains(&k),
            "{bpe} {k}"
        );
        assert!(blocked_fp(BLOCK_BITS as f64 / bpe, k) <= 1e-6);
        // Blocks fill unevenly: the same bits as a standard filter miss the target.
        assert!(blocked_fp(BLOCK_BITS as f64 / 28.8, k) > 2e-6);
        let l = layout(10_000, 1e-6);
        assert_eq!(l.bits_per_shard % BLOCK_BITS, 0);
        assert!(l.bits_per_shard as f64 >= l.entries_per_shard as f64 * bpe);
    }

    #[test]
    fn probes_stay_in_one_block_one_bit_each_in_order() {
        let l = layout(10_000, 1e-6);
        for i in 0..2000 {
            let (shard, block, probes) = l.probes(7, "shop", &format!("nonce-{i}"));
            assert_eq!(shard, 0);
            assert_eq!(block % (BLOCK_BITS / 8), 0);
            assert!(block + BLOCK_BITS / 8 <= l.bytes_per_shard());
            assert!(!probes.is_empty() && probes.len() <= 2 * l.k as usize);
            let pairs: Vec<(u8, u8)> = probes.chunks(2).map(|p| (p[0], p[1])).collect();
            assert!(pairs
                .iter()
                .all(|&(b, m)| u64::from(b) < BLOCK_BITS / 8 && m.count_ones() == 1));
            assert!(pairs.windows(2).all(|w| w[0] < w[1]), "{pairs:?}");
        }
    }

    /// The layout and the probes together, applied to a bitmap as the script does: at design
    /// load the measured false-positive rate is the target's (a target of 1e-3, so that a few
    /// million lookups measure it).
    #[test]
    fn the_measured_false_positive_rate_meets_the_target_at_design_load() {
        let target = 1e-3;
        let l = layout(50_000, target);
        let mut bitmap = vec![0u8; l.bytes_per_shard() as usize];
        let mut test_and_set = |nonce: &str, set: bool| {
            let (_, block, probes) = l.probes(42, "shop", nonce);
            let mut all = true;
            for p in probes.chunks(2) {
                let byte = &mut bitmap[block as usize + p[0] as usize];
                all &= *byte & p[1] != 0;
                if set {
                    *byte |= p[1];
                }
            }
            all
        };
        for i in 0..l.entries_per_shard {
            test_and_set(&format!("in-{i}"), true);
        }
        assert!((0..1000).all(|i| test_and_set(&format!("in-{i}"), false)));
        let trials = 2_000_000;
        let fp = (0..trials)
            .filter(|i| test_and_set(&format!("out-{i}"), false))
            .count() as f64
            / trials as f64;
        assert!(fp < target * 1.3 && fp > target / 3.0, "{fp}");
    }
}
