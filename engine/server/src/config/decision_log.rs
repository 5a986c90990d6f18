//! `[decision_log]`: the local log's files and ring, the ClickHouse sink (batches, timeouts, the
//! spool and its full policy) and request recording.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionLogConfig {
    /// ClickHouse HTTP URL. Absent = the embedded local log.
    pub clickhouse_url: Option<String>,
    pub clickhouse_database: String,
    pub clickhouse_user: String,
    pub clickhouse_password: Option<String>,
    /// Environment variable holding the password (instead of `clickhouse_password`).
    pub clickhouse_password_env: Option<String>,
    /// A cluster named in the ClickHouse servers' `<remote_servers>`: the schema is created on
    /// every node of it (replicated tables behind `Distributed` ones, with `ON CLUSTER`), and the
    /// engine writes to and reads from the `Distributed` tables through `clickhouse_url`.
    pub clickhouse_cluster: Option<String>,
    /// Apply the schema migrations at start (and before the first insert if ClickHouse was down).
    pub migrate: bool,
    /// A batch is sent when it holds this many rows…
    pub batch_rows: usize,
    /// …or is this old.
    pub batch_ms: u64,
    /// Bound on one insert.
    pub insert_timeout_ms: u64,
    /// Pause after a failed insert before the spool is tried again.
    pub retry_ms: u64,
    /// Where batches wait while ClickHouse is away. Default: `<dir>/spool`.
    pub spool_dir: Option<PathBuf>,
    pub spool_max_bytes: u64,
    pub on_spool_full: SpoolFull,
    pub dir: PathBuf,
    pub max_file_bytes: u64,
    pub max_files: usize,
    pub queue_size: usize,
    pub ring_size: usize,
    /// Record the rule-visible parts of each judged request (query, headers without credentials,
    /// params, body, device id) with its decision, so backtests can replay it.
    pub record_request: bool,
    /// Largest recorded request (JSON bytes); a bigger one is recorded without its body, or not
    /// at all.
    pub record_request_max_bytes: usize,
}

impl Default for DecisionLogConfig {
    fn default() -> Self {
        DecisionLogConfig {
            clickhouse_url: None,
            clickhouse_database: "default".into(),
            clickhouse_user: String::new(),
            clickhouse_password: None,
            clickhouse_password_env: None,
            clickhouse_cluster: None,
            migrate: true,
            batch_rows: 50_000,
            batch_ms: 250,
            insert_timeout_ms: 10_000,
            retry_ms: 1_000,
            spool_dir: None,
            spool_max_bytes: 4 * 1024 * 1024 * 1024,
            on_spool_full: SpoolFull::DropNewest,
            dir: PathBuf::from("rampart-data/decisions"),
            max_file_bytes: 64 * 1024 * 1024,
            max_files: 16,
            queue_size: 65_536,
            record_request: true,
            record_request_max_bytes: 4096,
            ring_size: 1_000,
        }
    }
}

/// What to do when the spool is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpoolFull {
    DropNewest,
    DropOldest,
}

impl DecisionLogConfig {
    /// Checks `[decision_log]`; every problem goes into `errs`.
    pub(super) fn check(&self, errs: &mut Vec<String>) {
        let dl = self;
        if dl.clickhouse_cluster.is_some() && dl.clickhouse_url.is_none() {
            errs.push("decision_log.clickhouse_cluster needs decision_log.clickhouse_url".into());
        }
        if let Some(url) = &dl.clickhouse_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errs.push(format!(
                    "decision_log.clickhouse_url {url:?} must be the HTTP interface's URL (http://host:8123)"
                ));
            }
            if url.starts_with("https://") {
                errs.push("decision_log.clickhouse_url: https is not built in; use http on a trusted network".into());
            }
            if dl.clickhouse_database.is_empty()
                || !dl
                    .clickhouse_database
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                errs.push(
                    "decision_log.clickhouse_database must be a plain identifier ([A-Za-z0-9_])"
                        .into(),
                );
            }
            if let Some(c) = &dl.clickhouse_cluster {
                if c.is_empty() || !c.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    errs.push(
                        "decision_log.clickhouse_cluster must be a plain identifier ([A-Za-z0-9_])"
                            .into(),
                    );
                }
            }
            if dl.clickhouse_password.is_some() && dl.clickhouse_password_env.is_some() {
                errs.push(
                    "decision_log: set clickhouse_password or clickhouse_password_env, not both"
                        .into(),
                );
            }
            if let Some(var) = &dl.clickhouse_password_env {
                if std::env::var(var).map(|v| v.is_empty()).unwrap_or(true) {
                    errs.push(format!(
                        "decision_log.clickhouse_password_env: {var} is not set"
                    ));
                }
            }
            if !(1..=1_000_000).contains(&dl.batch_rows) {
                errs.push("decision_log.batch_rows must be between 1 and 1000000".into());
            }
            if !(1..=60_000).contains(&dl.batch_ms)
                || !(1..=600_000).contains(&dl.insert_timeout_ms)
            {
                errs.push(
                    "decision_log.batch_ms must be 1–60000 and insert_timeout_ms 1–600000".into(),
                );
            }
            if !(1..=600_000).contains(&dl.retry_ms) {
                errs.push("decision_log.retry_ms must be between 1 and 600000".into());
            }
            if dl.spool_max_bytes < 1024 * 1024 {
                errs.push("decision_log.spool_max_bytes must be at least 1 MiB".into());
            }
        }
        if dl.max_file_bytes < 4096 {
            errs.push("decision_log.max_file_bytes must be at least 4096".into());
        }
        if dl.max_files == 0 || dl.queue_size == 0 {
            errs.push("decision_log.max_files and queue_size must be at least 1".into());
        }
        if !(256..=65_536).contains(&dl.record_request_max_bytes) {
            errs.push("decision_log.record_request_max_bytes must be 256–65536".into());
        }
    }
}
