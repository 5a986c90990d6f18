//! The Rampart engine server: configuration, HTTP API (actix-web), metrics, decision log and CLI.
//! The decision path itself lives in `rampart-core`; `docs/architecture.md` maps the modules.

pub mod admin;
pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod control;
pub mod declog;
pub mod error;
pub mod http;
pub mod metrics;
pub mod redis_state;
pub mod runtime;

pub use runtime::Runtime;
