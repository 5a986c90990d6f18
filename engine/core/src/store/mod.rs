//! The counting state behind the rule helpers, in process: TTL sets and sharded maps (the shared
//! building blocks), GCRA rate limits and sliding windows, HyperLogLog distinct counts, quotas and
//! claims, circuit breakers. Each store is a trait with an in-memory implementation here; the
//! server adds Redis implementations of the same traits. [`StoreError`] is the one error they all
//! return, answered by the declared `on_store_error` policy.

pub mod breaker;
mod error;
pub mod hll;
pub mod hot;
pub mod limits;
mod purge;
pub mod quota;
pub(crate) mod shard;
pub mod ttl;

pub use error::StoreError;
