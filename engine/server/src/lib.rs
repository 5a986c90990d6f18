//! The Rampart engine server: configuration, HTTP API (actix-web), metrics, decision log and CLI.
//! The decision path itself lives in `rampart-core`; `docs/architecture.md` maps the modules.
//!
//! # Public surface
//!
//! The binary (`main.rs`), the integration tests (`tests/`) and the benches (`benches/`) use this
//! crate from outside; everything else is `pub(crate)`. The modules they reach, and what for:
//!
//! - [`cli::run`]: the `rampart` command line (`main.rs`).
//! - [`config`]: [`config::Config`] (load, `validate`) and its sections, [`config::Validated`].
//! - [`runtime::Runtime`] (also at the crate root): builds the engine from a validated
//!   configuration; its `engine`, `log` and `config`, `start_background` and `shutdown`.
//! - [`app::configure`]: mounts the HTTP API, the admin API and the console on an actix `App`
//!   (the API tests drive it in process).
//! - [`clock::now_ms`]: the server time the tests sign requests with.
//! - [`auth`]: `hash_password` (admin users of the tests) and `ct_eq` (its bench).
//! - [`declog`]: the decision log a runtime holds (`flush`, `recent`) and
//!   [`declog::clickhouse`] (the sink, its rows and settings, `migrate`: the decision log bench).
//! - [`metrics::Metrics`]: the registry the ClickHouse sink reports to.
//! - [`redis_state`]: the Redis store implementations and their settings (the Redis tests and
//!   bench run them against real servers).
//!
//! `bench/load` (`rampart-load`) runs the `rampart` binary and uses no item of this crate.

pub(crate) mod admin;
pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub(crate) mod console;
pub(crate) mod control;
pub mod declog;
pub(crate) mod error;
pub(crate) mod http;
pub mod metrics;
pub mod redis_state;
pub mod runtime;

pub use runtime::Runtime;
