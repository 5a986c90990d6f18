//! The Rampart engine server: configuration, HTTP API (actix-web), metrics, decision log and CLI.
//! The decision path itself lives in `rampart-core`.

pub mod admin;
pub mod api;
pub mod chlog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod console_files;
pub mod control;
pub mod declog;
pub mod demo;
pub mod httpc;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod peers;
pub mod query;
pub mod redis_state;
pub mod regress_cmd;
pub mod reqid;
pub mod runtime;
pub mod tls;

pub use runtime::Runtime;
