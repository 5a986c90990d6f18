//! Rampart's pure core: the request model, verdicts and the anti-replay core.
//!
//! Nothing here does I/O or knows about HTTP servers, Redis or async runtimes: state sits behind the
//! [`nonce::NonceStore`] and [`fingerprint::FingerprintStore`] traits, time is a parameter, and the
//! decision path ([`engine::Engine::decide`]) is a plain function of its inputs. The server crate
//! supplies clocks, stores, metrics and the network.

pub mod backtest;
pub mod bloom;
pub mod breaker;
pub mod bundle;
pub mod canonical;
pub mod engine;
pub mod fingerprint;
pub mod forward;
pub mod hll;
pub mod limits;
pub mod model;
pub mod nonce;
pub mod quota;
pub mod redact;
pub mod regress;
pub mod rollout;
pub mod rules;
mod shard;
pub mod sign;
pub mod trace;
pub mod ttl;
pub mod waf;

pub use engine::{Engine, EngineSettings, FailPolicy, Fallback, RequestError, StorePolicies};
pub use model::{Action, Code, DecideRequest, Step, Verdict};
