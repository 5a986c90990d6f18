//! Quotas and claims: a limited stock handed out at most once per user and never oversold — the
//! coupon that each user may redeem once, the live-stream lottery with 100 prizes.
//!
//! `claim(pool, user, stock)` is one atomic step: if `user` already holds a claim in `pool` the
//! answer is [`Claim::Duplicate`]; else if `pool` has handed out `stock` claims it is
//! [`Claim::Exhausted`]; else the claim is recorded and [`Claim::Granted`] returned with what is
//! left. The stock is read from the rule on every call, so editing the rule changes the stock
//! (claims already granted stay granted). Claims live for the pool's lifetime (`ttl_ms` after
//! the pool's last claim), so "once per user" holds for the whole campaign.
//!
//! An operator can **refill** a pool ([`QuotaStore::refill`]): stock added on top of the rule's,
//! kept with the pool, so a campaign that ran out can go on without editing the rule and
//! without letting anyone claim twice (the Redis store keeps it in a segment of its own that
//! every user's walk ends on; see `RedisQuotas`).
//!
//! [`QuotaStore`] is the trait the Redis store implements with one script per claim (and stock
//! segments spread over cluster nodes); [`LocalQuotas`] is the in-process implementation: one
//! mutex per pool shard, so of N racing claims exactly `stock` succeed.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::purge::{shard_indices, PurgeGate};
use crate::store::StoreError;

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Granted {
        remaining: u64,
    },
    /// This user already holds a claim in the pool.
    Duplicate,
    /// The pool's stock is gone.
    Exhausted,
}

impl Claim {
    pub fn as_str(self) -> &'static str {
        match self {
            Claim::Granted { .. } => "granted",
            Claim::Duplicate => "duplicate",
            Claim::Exhausted => "exhausted",
        }
    }
}

/// What an operator sees of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolView {
    /// Claims granted, from the rule's stock and from refills.
    pub claimed: u64,
    /// Stock added by refills, on top of the rule's.
    pub refilled: u64,
    /// Claims per stock segment (`"0"`, `"1"`, …, and `"refill"`), on a segmented store; empty
    /// for the in-process store.
    pub segments: Vec<SegmentView>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SegmentView {
    pub segment: String,
    pub claimed: u64,
}

pub trait QuotaStore: Send + Sync {
    /// Atomically: one claim of `pool` for `user` against a stock of `stock`.
    fn claim(&self, pool: &str, user: &str, stock: u64, now_ms: i64) -> Result<Claim, StoreError>;
    /// What a claim would answer now, changing nothing (shadow rules use this).
    fn peek(&self, pool: &str, user: &str, stock: u64) -> Result<Claim, StoreError>;
    /// Claims granted so far in `pool`.
    fn claimed(&self, pool: &str) -> Result<u64, StoreError>;
    /// Adds `add` to the pool's stock on top of the rule's (an operator's repair): `add` more
    /// users may claim, and nobody twice. The pool's refilled stock after it.
    fn refill(&self, pool: &str, add: u64, now_ms: i64) -> Result<u64, StoreError>;
    /// The pool's claims and refills.
    fn view(&self, pool: &str) -> Result<PoolView, StoreError>;
    /// The pools in which `user` holds a claim, at most `max` of them, sorted (the subject view
    /// of an operator; never on a decision's path).
    fn held(&self, user: &str, max: usize) -> Result<Vec<String>, StoreError>;
    /// Whether every instance sees the same pools (a refill is then done once, not by each).
    fn shared(&self) -> bool {
        false
    }
    fn maintain(&self, now_ms: i64);
    /// Pools held.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Default)]
struct Pool {
    holders: HashSet<Box<str>>,
    last_ms: i64,
    /// Stock added by refills.
    refilled: u64,
}

impl Pool {
    fn answer(&self, user: &str, stock: u64) -> Claim {
        let stock = stock.saturating_add(self.refilled);
        if self.holders.contains(user) {
            Claim::Duplicate
        } else if self.holders.len() as u64 >= stock {
            Claim::Exhausted
        } else {
            Claim::Granted {
                remaining: stock - self.holders.len() as u64 - 1,
            }
        }
    }
}

type PoolShard = Mutex<HashMap<Box<str>, Pool>>;

const SHARDS: usize = 16;

/// In-process quotas. Memory: one entry per granted claim (a pool of 100 prizes holds 100 user
/// ids), bounded by `max_claims` over all pools.
pub struct LocalQuotas {
    shards: Box<[PoolShard]>,
    hasher: std::collections::hash_map::RandomState,
    claims: AtomicUsize,
    pools: AtomicUsize,
    max_claims: usize,
    ttl_ms: i64,
    last_purge: PurgeGate,
}

impl LocalQuotas {
    /// `ttl_ms`: how long a pool is kept after its last claim.
    pub fn new(max_claims: usize, ttl_ms: i64) -> Self {
        LocalQuotas {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            claims: AtomicUsize::new(0),
            pools: AtomicUsize::new(0),
            max_claims,
            ttl_ms,
            last_purge: PurgeGate::new(),
        }
    }

    /// Forgets every pool.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.claims.store(0, Ordering::Relaxed);
        self.pools.store(0, Ordering::Relaxed);
    }

    fn shard(&self, pool: &str) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Pool>> {
        self.shards[(self.hasher.hash_one(pool) as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

fn check(pool: &str, user: &str) -> Result<(), StoreError> {
    if pool.is_empty() || user.is_empty() {
        return Err(StoreError::Invalid("claim needs a pool and a user".into()));
    }
    Ok(())
}

impl QuotaStore for LocalQuotas {
    fn claim(&self, pool: &str, user: &str, stock: u64, now_ms: i64) -> Result<Claim, StoreError> {
        check(pool, user)?;
        let mut map = self.shard(pool);
        let answer = map.get(pool).map_or_else(
            || Pool::default().answer(user, stock),
            |p| p.answer(user, stock),
        );
        if let Claim::Granted { .. } = answer {
            if self.claims.load(Ordering::Relaxed) >= self.max_claims {
                return Err(StoreError::Full(format!(
                    "quota store holds {} claims (the configured maximum)",
                    self.max_claims
                )));
            }
            let p = map.entry(pool.into()).or_insert_with(|| {
                self.pools.fetch_add(1, Ordering::Relaxed);
                Pool::default()
            });
            p.holders.insert(user.into());
            p.last_ms = now_ms;
            self.claims.fetch_add(1, Ordering::Relaxed);
        }
        Ok(answer)
    }

    fn peek(&self, pool: &str, user: &str, stock: u64) -> Result<Claim, StoreError> {
        check(pool, user)?;
        let map = self.shard(pool);
        Ok(map.get(pool).map_or_else(
            || Pool::default().answer(user, stock),
            |p| p.answer(user, stock),
        ))
    }

    fn claimed(&self, pool: &str) -> Result<u64, StoreError> {
        Ok(self
            .shard(pool)
            .get(pool)
            .map_or(0, |p| p.holders.len() as u64))
    }

    fn refill(&self, pool: &str, add: u64, now_ms: i64) -> Result<u64, StoreError> {
        if pool.is_empty() {
            return Err(StoreError::Invalid("refill needs a pool".into()));
        }
        let mut map = self.shard(pool);
        let p = map.entry(pool.into()).or_insert_with(|| {
            self.pools.fetch_add(1, Ordering::Relaxed);
            Pool::default()
        });
        p.refilled = p.refilled.saturating_add(add);
        p.last_ms = now_ms;
        Ok(p.refilled)
    }

    fn view(&self, pool: &str) -> Result<PoolView, StoreError> {
        Ok(self
            .shard(pool)
            .get(pool)
            .map_or_else(PoolView::default, |p| PoolView {
                claimed: p.holders.len() as u64,
                refilled: p.refilled,
                segments: Vec::new(),
            }))
    }

    fn held(&self, user: &str, max: usize) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(
                map.iter()
                    .filter(|(_, p)| p.holders.contains(user))
                    .map(|(name, _)| name.to_string()),
            );
        }
        out.sort_unstable();
        out.truncate(max);
        Ok(out)
    }

    fn maintain(&self, now_ms: i64) {
        let due = self.last_purge.due(now_ms, self.shards.len());
        for i in shard_indices(due, self.shards.len()) {
            let mut map = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, p| {
                let keep = now_ms - p.last_ms < self.ttl_ms;
                if !keep {
                    self.claims.fetch_sub(p.holders.len(), Ordering::Relaxed);
                    self.pools.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
        }
    }

    fn len(&self) -> usize {
        self.pools.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn once_per_user_and_never_oversold() {
        let q = LocalQuotas::new(1000, 60_000);
        assert_eq!(
            q.claim("p", "a", 2, 0).unwrap(),
            Claim::Granted { remaining: 1 }
        );
        assert_eq!(q.claim("p", "a", 2, 0).unwrap(), Claim::Duplicate);
        assert_eq!(
            q.peek("p", "b", 2).unwrap(),
            Claim::Granted { remaining: 0 }
        );
        assert_eq!(
            q.claim("p", "b", 2, 0).unwrap(),
            Claim::Granted { remaining: 0 }
        );
        assert_eq!(q.claim("p", "c", 2, 0).unwrap(), Claim::Exhausted);
        assert_eq!(q.claim("p", "b", 2, 0).unwrap(), Claim::Duplicate);
        assert_eq!(q.claimed("p").unwrap(), 2);
        // A larger stock in an edited rule hands out more; a smaller one stops at once.
        assert_eq!(
            q.claim("p", "c", 3, 0).unwrap(),
            Claim::Granted { remaining: 0 }
        );
        assert_eq!(q.claim("p", "d", 1, 0).unwrap(), Claim::Exhausted);
        assert!(q.claim("", "d", 1, 0).is_err());
    }

    #[test]
    fn racing_claims_grant_exactly_the_stock() {
        let q = Arc::new(LocalQuotas::new(1_000_000, 60_000));
        let stock = 100;
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let q = q.clone();
                    s.spawn(move || {
                        let mut n = 0;
                        for i in 0..1000 {
                            // Every user tries twice, from two threads.
                            let user = format!("u{}", (t / 2) * 1000 + i);
                            if let Claim::Granted { .. } =
                                q.claim("prize", &user, stock, 0).unwrap()
                            {
                                n += 1;
                            }
                        }
                        n
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(granted, stock as usize);
        assert_eq!(q.claimed("prize").unwrap(), stock);
    }

    #[test]
    fn pools_expire_after_their_last_claim() {
        let q = LocalQuotas::new(10, 1000);
        q.claim("p", "a", 5, 0).unwrap();
        q.maintain(500);
        assert_eq!(q.len(), 1);
        q.maintain(5000);
        assert_eq!(q.len(), 0);
        assert_eq!(
            q.claim("p", "a", 5, 5000).unwrap(),
            Claim::Granted { remaining: 4 }
        );
    }

    #[test]
    fn a_refill_lets_more_users_claim_and_nobody_twice() {
        let q = LocalQuotas::new(1000, 60_000);
        q.claim("p", "a", 1, 0).unwrap();
        assert_eq!(q.claim("p", "b", 1, 0).unwrap(), Claim::Exhausted);
        assert_eq!(q.refill("p", 1, 10).unwrap(), 1);
        assert_eq!(q.claim("p", "a", 1, 20).unwrap(), Claim::Duplicate);
        assert_eq!(
            q.claim("p", "b", 1, 20).unwrap(),
            Claim::Granted { remaining: 0 }
        );
        assert_eq!(q.claim("p", "c", 1, 20).unwrap(), Claim::Exhausted);
        let v = q.view("p").unwrap();
        assert_eq!((v.claimed, v.refilled), (2, 1));
        // A pool refilled before its first claim starts with the extra stock.
        q.refill("new", 2, 0).unwrap();
        assert_eq!(
            q.claim("new", "a", 0, 0).unwrap(),
            Claim::Granted { remaining: 1 }
        );
        assert!(q.refill("", 1, 0).is_err());
    }

    #[test]
    fn held_lists_the_pools_a_user_claimed_in() {
        let q = LocalQuotas::new(1000, 60_000);
        q.claim("lottery:7", "a", 5, 0).unwrap();
        q.claim("coupon:X", "a", 5, 0).unwrap();
        q.claim("coupon:X", "b", 5, 0).unwrap();
        // A peek and a refused claim hold nothing.
        q.peek("coupon:Y", "a", 5).unwrap();
        q.claim("coupon:Z", "a", 0, 0).unwrap();
        assert_eq!(q.held("a", 10).unwrap(), ["coupon:X", "lottery:7"]);
        assert_eq!(q.held("a", 1).unwrap(), ["coupon:X"]);
        assert_eq!(q.held("b", 10).unwrap(), ["coupon:X"]);
        assert!(q.held("c", 10).unwrap().is_empty());
    }

    #[test]
    fn bounded() {
        let q = LocalQuotas::new(2, 1000);
        q.claim("p", "a", 5, 0).unwrap();
        q.claim("q", "a", 5, 0).unwrap();
        assert!(matches!(q.claim("p", "b", 5, 0), Err(StoreError::Full(_))));
        assert_eq!(q.claim("p", "a", 5, 0).unwrap(), Claim::Duplicate);
    }
}
