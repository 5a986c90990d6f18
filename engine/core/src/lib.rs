//! Rampart's pure core: the request model, verdicts and the anti-replay core.
//!
//! Nothing here does I/O or knows about HTTP servers, Redis or async runtimes: state sits behind the
//! [`replay::nonce::NonceStore`] and [`replay::fingerprint::FingerprintStore`] traits, time is a parameter, and the
//! decision path ([`engine::Engine::decide`]) is a plain function of its inputs. The server crate
//! supplies clocks, stores, metrics and the network.

pub mod challenge;
pub mod engine;
pub mod forward;
pub mod lifecycle;
pub mod memo;
pub mod model;
pub mod path;
pub mod policy;
pub mod redact;
pub mod replay;
pub mod rollout;
pub mod rules;
pub mod store;
pub mod trace;
pub mod waf;

pub use engine::{Engine, EngineSettings, Fallback, RequestError};
pub use model::{Action, Code, DecideRequest, Step, Verdict};
pub use policy::{FailPolicy, StorePolicies};
