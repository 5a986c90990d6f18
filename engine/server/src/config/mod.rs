//! Configuration: one TOML file, `RAMPART_<SECTION>_<KEY>` environment overrides, validated as a
//! whole before any port is bound. Every key is documented in `docs/config.md`.

pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

use rampart_core::engine::EngineSettings;
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy, RoutePolicy, StorePolicies};
use rampart_core::replay::bloom::SlicedBloomConfig;
use serde::Deserialize;

/// The secret of the `demo` app of the embedded defaults. For local trials only.
pub const DEMO_SECRET: &str = "demo-secret";

/// Sections that `RAMPART_<SECTION>_<KEY>` may override (longest match first).
const SECTIONS: [&str; 7] = [
    "decision_log",
    "admin",
    "fingerprint",
    "server",
    "state",
    "rules",
    "log",
];

/// Environment variables with the `RAMPART_` prefix that are not config overrides.
const NOT_OVERRIDES: [&str; 1] = ["RAMPART_CONFIG"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub apps: Vec<AppConfig>,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub fingerprint: FingerprintConfig,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub decision_log: DecisionLogConfig,
    #[serde(default)]
    pub rules: RulesConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub admin: AdminConfig,
}

/// `[admin]`: who may use the admin API and the console, and how rollouts are guarded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where versions, the rollout state, lists and the audit log live with local state.
    /// Absent = `control` beside `[decision_log] dir` (`rampart-data/control` by default).
    pub state_dir: Option<PathBuf>,
    pub users: Vec<AdminUser>,
    pub tokens: Vec<AdminToken>,
    pub session_ttl_ms: i64,
    /// Mark the session cookie `Secure` (browsers still send it to `http://localhost`).
    pub cookie_secure: bool,
    pub login_max_failures: u32,
    pub login_lockout_ms: i64,
    /// How often an instance looks for changes made on other instances.
    pub poll_ms: u64,
    pub canary_min_samples: u64,
    pub canary_max_refusal_increase: f64,
    pub canary_max_error_increase: f64,
    /// Public keys whose signed rule bundles `POST /admin/v1/rulesets` accepts.
    pub bundle_keys: Vec<BundleKey>,
    /// Dev mode: also accept unsigned uploads (and stage them). On in the embedded defaults only.
    pub allow_unsigned_uploads: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            state_dir: None,
            users: Vec::new(),
            tokens: Vec::new(),
            session_ttl_ms: 8 * 3_600_000,
            cookie_secure: true,
            login_max_failures: 5,
            login_lockout_ms: 300_000,
            poll_ms: 500,
            canary_min_samples: 200,
            canary_max_refusal_increase: 0.05,
            canary_max_error_increase: 0.01,
            bundle_keys: Vec::new(),
            allow_unsigned_uploads: false,
        }
    }
}

/// `[[admin.bundle_keys]]`: a trusted public key of the rule pipeline (`rampart-rules keygen`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleKey {
    /// Shown in the audit log and the version's metadata as the signer.
    pub name: String,
    /// `ed25519:<base64>` (the `.pub` file `rampart-rules keygen` writes).
    pub public_key: String,
}

/// `[[admin.users]]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminUser {
    pub name: String,
    pub role: crate::auth::Role,
    /// PHC-format argon2 hash (`rampart hash-password`).
    pub password_hash: String,
}

impl std::fmt::Debug for AdminUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminUser")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// `[[admin.tokens]]`: API tokens for pipelines.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminToken {
    pub name: String,
    pub role: crate::auth::Role,
    /// Lower-case hex SHA-256 of the token.
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Or: the environment variable holding the token itself.
    #[serde(default)]
    pub token_env: Option<String>,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("token_env", &self.token_env)
            .finish_non_exhaustive()
    }
}

impl AdminConfig {
    /// The trusted bundle keys (checked by `validate`).
    pub fn trusted_keys(&self) -> Vec<rampart_core::lifecycle::bundle::PublicKey> {
        self.bundle_keys
            .iter()
            .filter_map(|k| {
                rampart_core::lifecycle::bundle::PublicKey::parse(&k.name, &k.public_key).ok()
            })
            .collect()
    }

    /// The configured identities, with token hashes resolved (checked by `validate`).
    pub fn identities(&self) -> crate::auth::Identities {
        use crate::auth::{Identities, Token, User};
        use sha2::Digest;
        Identities {
            users: self
                .users
                .iter()
                .map(|u| {
                    (
                        u.name.clone(),
                        User {
                            name: u.name.clone(),
                            role: u.role,
                            password_hash: u.password_hash.clone(),
                        },
                    )
                })
                .collect(),
            tokens: self
                .tokens
                .iter()
                .filter_map(|t| {
                    let sha256: [u8; 32] = match (&t.token_sha256, &t.token_env) {
                        (Some(h), _) => hex::decode(h).ok()?.try_into().ok()?,
                        (None, Some(env)) => {
                            sha2::Sha256::digest(std::env::var(env).ok()?.as_bytes()).into()
                        }
                        (None, None) => return None,
                    };
                    Some(Token {
                        name: t.name.clone(),
                        role: t.role,
                        sha256,
                    })
                })
                .collect(),
        }
    }

    fn check(&self, errs: &mut Vec<String>) {
        let mut names = std::collections::HashSet::new();
        for u in &self.users {
            if !crate::auth::valid_user_name(&u.name) {
                errs.push(format!(
                    "admin.users: name {:?} must be 1–64 of [A-Za-z0-9-_@+]",
                    u.name
                ));
            }
            if !names.insert(u.name.clone()) {
                errs.push(format!("admin.users: {:?} appears twice", u.name));
            }
            if let Err(e) = crate::auth::check_hash(&u.password_hash) {
                errs.push(format!(
                    "admin.users {:?}: password_hash is not an argon2 PHC string ({e}); make one with `rampart hash-password`",
                    u.name
                ));
            }
        }
        for t in &self.tokens {
            if !crate::auth::valid_user_name(&t.name) || !names.insert(t.name.clone()) {
                errs.push(format!(
                    "admin.tokens: name {:?} must be 1–64 of [A-Za-z0-9-_@+] and differ from every user and token",
                    t.name
                ));
            }
            match (&t.token_sha256, &t.token_env) {
                (Some(h), None) => {
                    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                        errs.push(format!(
                            "admin.tokens {:?}: token_sha256 must be 64 hex characters",
                            t.name
                        ));
                    }
                }
                (None, Some(env)) => match std::env::var(env) {
                    Ok(v) if v.len() >= 16 => {}
                    Ok(_) => errs.push(format!(
                        "admin.tokens {:?}: the token in {env} must be at least 16 characters",
                        t.name
                    )),
                    Err(_) => errs.push(format!(
                        "admin.tokens {:?}: environment variable {env} is not set",
                        t.name
                    )),
                },
                _ => errs.push(format!(
                    "admin.tokens {:?}: give exactly one of token_sha256 and token_env",
                    t.name
                )),
            }
        }
        if self.session_ttl_ms < 60_000 || self.session_ttl_ms > 30 * 86_400_000 {
            errs.push("admin.session_ttl_ms must be between 60000 (1 min) and 30 days".into());
        }
        if self.login_max_failures == 0 || self.login_lockout_ms < 1000 {
            errs.push(
                "admin.login_max_failures must be ≥ 1 and admin.login_lockout_ms ≥ 1000".into(),
            );
        }
        if !(50..=60_000).contains(&self.poll_ms) {
            errs.push("admin.poll_ms must be 50–60000".into());
        }
        if self.canary_min_samples == 0 {
            errs.push("admin.canary_min_samples must be ≥ 1".into());
        }
        let mut key_names = std::collections::HashSet::new();
        for k in &self.bundle_keys {
            if k.name.is_empty() || k.name.len() > 64 || !key_names.insert(k.name.as_str()) {
                errs.push(format!(
                    "admin.bundle_keys: name {:?} must be 1–64 characters and unique",
                    k.name
                ));
            }
            if let Err(e) =
                rampart_core::lifecycle::bundle::PublicKey::parse(&k.name, &k.public_key)
            {
                errs.push(format!("admin.bundle_keys {:?}: {e}", k.name));
            }
        }
        for (k, v) in [
            (
                "canary_max_refusal_increase",
                self.canary_max_refusal_increase,
            ),
            ("canary_max_error_increase", self.canary_max_error_increase),
        ] {
            if !(0.0..=1.0).contains(&v) {
                errs.push(format!(
                    "admin.{k} must be between 0 and 1 (a rate difference)"
                ));
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
    pub max_body_bytes: usize,
    pub max_batch_body_bytes: usize,
    pub max_batch_items: usize,
    /// Largest total of request header names and values (each plus 4 bytes for `: ` and CRLF).
    pub max_header_bytes: usize,
    /// Open connections per worker; more wait in the accept queue.
    pub max_connections: usize,
    /// New TLS-free connections accepted per worker at once (actix-web's handshake limit).
    pub max_connection_rate: usize,
    /// Time a client has to send a whole request head; slower → 408 and the connection closed.
    pub client_request_timeout_ms: u64,
    /// Time to finish closing a connection after the response; then it is dropped.
    pub client_disconnect_timeout_ms: u64,
    /// Idle keep-alive time of a connection between requests; 0 = no keep-alive.
    pub keep_alive_ms: u64,
    pub challenge_status: u16,
    /// Name of this instance in the decision log; empty = host name.
    pub instance: String,
    /// PEM certificate chain; with `tls_key_file`, the server speaks HTTPS only.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate.
    pub tls_key_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            workers: 0,
            max_body_bytes: 64 * 1024,
            max_batch_body_bytes: 1024 * 1024,
            max_batch_items: 100,
            max_header_bytes: 16 * 1024,
            max_connections: 25_000,
            max_connection_rate: 256,
            client_request_timeout_ms: 5_000,
            client_disconnect_timeout_ms: 1_000,
            keep_alive_ms: 5_000,
            challenge_status: 401,
            instance: String::new(),
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    pub id: String,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub secret_env: Option<String>,
    #[serde(default = "default_window_ms")]
    pub window_ms: i64,
}

impl std::fmt::Debug for AppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppConfig")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_env", &self.secret_env)
            .field("window_ms", &self.window_ms)
            .finish()
    }
}

fn default_window_ms() -> i64 {
    5_000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Local,
    Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonceMode {
    Bloom,
    Exact,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    Deny,
    Allow,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    pub backend: Backend,
    pub redis_url: String,
    pub nonce_mode: NonceMode,
    pub on_store_error: OnStoreError,
    /// Peak accepted requests per second the nonce filter is sized for.
    pub expected_rps: u64,
    /// Target false-positive rate of the Bloom filter at `expected_rps`.
    pub target_fp: f64,
    /// How long a nonce record is kept, from the earliest moment its request could be accepted
    /// (`ts − window`). Default: 2 × the largest app window. Must be ≥ 2 × every app's window.
    pub nonce_retention_ms: Option<i64>,
    /// Width of a Bloom slice. Default: retention / 48.
    pub nonce_slice_ms: Option<i64>,
    /// Cap on live entries in exact nonce mode.
    pub exact_max_entries: usize,
    /// Cap on live duplicate-submission fingerprints.
    pub fingerprint_max_entries: usize,
    /// Seed nodes of a Redis Cluster (`redis://host:port`); non-empty = cluster mode.
    pub redis_cluster_nodes: Vec<String>,
    /// Prefix of every Redis key.
    pub redis_prefix: String,
    /// Bound on each Redis call.
    pub redis_timeout_ms: u64,
    /// Bound on connecting (and on waiting for the first connection at start).
    pub redis_connect_timeout_ms: u64,
    /// Multiplexed connections (per node) of the detached writes; the decision path uses one
    /// blocking connection per worker thread.
    pub redis_connections: usize,
    /// Bitmaps per Bloom time slice in Redis (spreads a slice over cluster nodes).
    pub bloom_shards: u32,
    /// Stock segments per quota pool; 0 = 1 on a single node, 8 on a cluster.
    pub quota_segments: u32,
    /// Added to every Redis expiry of the anti-replay state: the most the engine instances'
    /// clocks may differ.
    pub clock_margin_ms: i64,
    /// Keep in-process nonce and fingerprint stores up to date, and use them while Redis fails
    /// (where the store's policy is `allow`).
    pub local_fallback: bool,
    /// With `backend = "local"` and a ClickHouse decision log: how often to look in the log for
    /// other instances serving the same apps (per-instance state by mistake). 0 = never.
    pub peer_check_ms: u64,
    pub nonce_on_error: Option<OnStoreError>,
    pub fingerprint_on_error: Option<OnStoreError>,
    pub limits_on_error: Option<OnStoreError>,
    pub counters_on_error: Option<OnStoreError>,
    pub distinct_on_error: Option<OnStoreError>,
    pub quotas_on_error: Option<OnStoreError>,
    pub reputation_on_error: Option<OnStoreError>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: Backend::Local,
            redis_url: String::new(),
            nonce_mode: NonceMode::Bloom,
            on_store_error: OnStoreError::Deny,
            expected_rps: 100_000,
            target_fp: 1e-6,
            nonce_retention_ms: None,
            nonce_slice_ms: None,
            exact_max_entries: 10_000_000,
            fingerprint_max_entries: 10_000_000,
            redis_cluster_nodes: Vec::new(),
            redis_prefix: "rampart".into(),
            redis_timeout_ms: 200,
            redis_connect_timeout_ms: 2_000,
            redis_connections: 1,
            bloom_shards: 16,
            quota_segments: 0,
            clock_margin_ms: 1_000,
            local_fallback: false,
            peer_check_ms: 30_000,
            nonce_on_error: None,
            fingerprint_on_error: None,
            limits_on_error: None,
            counters_on_error: None,
            distinct_on_error: None,
            quotas_on_error: None,
            reputation_on_error: None,
        }
    }
}

impl OnStoreError {
    pub fn policy(self) -> FailPolicy {
        match self {
            OnStoreError::Deny => FailPolicy::Deny,
            OnStoreError::Allow => FailPolicy::Allow,
        }
    }
}

impl StateConfig {
    /// Each store's failure policy: its own `*_on_error` key, else `on_store_error`. Quotas
    /// default to `deny` whatever `on_store_error` says (a claim is never granted blind).
    pub fn policies(&self) -> StorePolicies {
        let d = self.on_store_error;
        let p = |o: Option<OnStoreError>| o.unwrap_or(d).policy();
        StorePolicies {
            nonce: p(self.nonce_on_error),
            fingerprint: p(self.fingerprint_on_error),
            limits: p(self.limits_on_error),
            counters: p(self.counters_on_error),
            distinct: p(self.distinct_on_error),
            quotas: self.quotas_on_error.unwrap_or(OnStoreError::Deny).policy(),
            reputation: p(self.reputation_on_error),
        }
    }

    pub fn redis_settings(&self) -> crate::redis_state::RedisSettings {
        crate::redis_state::RedisSettings {
            url: self.redis_url.clone(),
            cluster_nodes: self.redis_cluster_nodes.clone(),
            prefix: self.redis_prefix.clone(),
            timeout: std::time::Duration::from_millis(self.redis_timeout_ms),
            connect_timeout: std::time::Duration::from_millis(self.redis_connect_timeout_ms),
            connections: self.redis_connections,
        }
    }

    /// Stock segments per quota pool (the `0` = automatic default resolved).
    pub fn quota_segments(&self) -> u32 {
        match self.quota_segments {
            0 if self.redis_cluster_nodes.is_empty() => 1,
            0 => 8,
            n => n,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FingerprintConfig {
    pub window_ms: i64,
    pub methods: Vec<String>,
    pub volatile_fields: Vec<String>,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        let d = DedupPolicy::default();
        FingerprintConfig {
            window_ms: d.window_ms,
            methods: d.methods,
            volatile_fields: d.volatile_fields,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    #[serde(default)]
    pub app: Option<String>,
    pub path: String,
    /// Narrows the app's time window on this route.
    #[serde(default)]
    pub window_ms: Option<i64>,
    #[serde(default)]
    pub dedup_window_ms: Option<i64>,
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    #[serde(default)]
    pub volatile_fields: Option<Vec<String>>,
}

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulesConfig {
    /// Directory of the rule set (`edge/`, `gateway/`, `business/`, `lists/`). Absent = the
    /// built-in default set, or no rules when `defaults = false`.
    pub dir: Option<PathBuf>,
    /// Without `dir`: run the default rule set built into the binary (the repository's `rules/`).
    pub defaults: bool,
    /// Samples the regression endpoint uses; absent = `<dir>/samples`, else the built-in ones.
    pub samples_dir: Option<PathBuf>,
    /// Reputation (fed by gateway/business refusals and replays) is summed over this window.
    pub reputation_window_ms: i64,
    /// Watch `dir` and swap in a new set when its files change (a failed compile keeps the old).
    pub reload: bool,
    pub reload_interval_ms: u64,
    pub edge_on_error: OnStoreError,
    pub gateway_on_error: OnStoreError,
    pub business_on_error: OnStoreError,
    pub challenge_score: i64,
    pub review_score: i64,
    pub deny_score: i64,
    /// Cap on keys held by `rate_limit` and `count` (past it those helpers fail, and the rule's
    /// tier default applies).
    pub max_limiter_keys: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        let d = rampart_core::rules::RuleSettings::default();
        RulesConfig {
            dir: None,
            defaults: true,
            samples_dir: None,
            reputation_window_ms: 3_600_000,
            reload: true,
            reload_interval_ms: 1000,
            edge_on_error: OnStoreError::Allow,
            gateway_on_error: OnStoreError::Allow,
            business_on_error: OnStoreError::Allow,
            challenge_score: d.challenge_score,
            review_score: d.review_score,
            deny_score: d.deny_score,
            max_limiter_keys: 1_000_000,
        }
    }
}

impl RulesConfig {
    pub fn settings(&self) -> rampart_core::rules::RuleSettings {
        let p = |o: OnStoreError| match o {
            OnStoreError::Deny => FailPolicy::Deny,
            OnStoreError::Allow => FailPolicy::Allow,
        };
        rampart_core::rules::RuleSettings {
            on_error: [
                p(self.edge_on_error),
                p(self.gateway_on_error),
                p(self.business_on_error),
            ],
            challenge_score: self.challenge_score,
            review_score: self.review_score,
            deny_score: self.deny_score,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug`, `trace`, or a tracing filter directive.
    pub level: String,
    /// `json` or `text`.
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// Validated configuration, with derived values filled in.
#[derive(Debug, Clone)]
pub struct Validated {
    pub raw: Config,
    pub listen: SocketAddr,
    pub apps: Vec<(String, Vec<u8>, i64)>,
    pub filter: SlicedBloomConfig,
    pub retention_ms: i64,
    /// The TLS settings when `[server] tls_cert_file` and `tls_key_file` are set, read by
    /// [`Validated::with_tls`] (`serve` and `check` only: other commands never need the key).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

impl Config {
    /// The embedded defaults: a `demo` app with a documented dev secret, local state, local log.
    pub fn embedded() -> Config {
        Config {
            server: ServerConfig::default(),
            apps: vec![AppConfig {
                id: "demo".into(),
                secret: Some(DEMO_SECRET.into()),
                secret_env: None,
                // Generous so that a hand-typed curl from the README fits; tighten in production.
                window_ms: 30_000,
            }],
            state: StateConfig::default(),
            fingerprint: FingerprintConfig::default(),
            routes: Vec::new(),
            decision_log: DecisionLogConfig::default(),
            rules: RulesConfig::default(),
            log: LogConfig::default(),
            // A local trial: rule sets may be uploaded from the console without a pipeline key.
            admin: AdminConfig {
                allow_unsigned_uploads: true,
                ..AdminConfig::default()
            },
        }
    }

    /// Loads `path` (or the embedded defaults when `None`) and applies the environment overrides.
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    pub fn load_with_env(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (name, mut table) = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                let table: toml::Table =
                    text.parse()
                        .map_err(|e: toml::de::Error| ConfigError::Parse {
                            path: p.display().to_string(),
                            message: e.to_string(),
                        })?;
                (p.display().to_string(), table)
            }
            None => (
                "<embedded defaults>".to_string(),
                toml::Table::try_from(EmbeddedToml::from(Config::embedded()))
                    .expect("embedded defaults serialise"),
            ),
        };
        apply_env(&mut table, env)?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: name,
                message: e.to_string(),
            })
    }

    /// Checks everything and derives the values the server needs. Collects every problem.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let mut errs = Vec::new();
        let listen = match self.server.listen.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errs.push(format!(
                    "server.listen {:?} is not an address like 127.0.0.1:8080",
                    self.server.listen
                ));
                None
            }
        };
        if self.server.max_body_bytes < 256 {
            errs.push("server.max_body_bytes must be at least 256".into());
        }
        if self.server.max_batch_body_bytes < self.server.max_body_bytes {
            errs.push("server.max_batch_body_bytes must be ≥ server.max_body_bytes".into());
        }
        if !(1024..=65_536).contains(&self.server.max_header_bytes) {
            errs.push("server.max_header_bytes must be 1024–65536".into());
        }
        if self.server.max_connections == 0 || self.server.max_connection_rate == 0 {
            errs.push("server.max_connections and server.max_connection_rate must be ≥ 1".into());
        }
        // actix-http measures these against a clock it refreshes every 500 ms: below a second
        // a deadline can already have passed when the head arrives.
        if !(1_000..=60_000).contains(&self.server.client_request_timeout_ms) {
            errs.push("server.client_request_timeout_ms must be 1000–60000".into());
        }
        if self.server.client_disconnect_timeout_ms > 60_000 {
            errs.push("server.client_disconnect_timeout_ms must be ≤ 60000".into());
        }
        if self.server.keep_alive_ms > 600_000 {
            errs.push("server.keep_alive_ms must be ≤ 600000".into());
        }
        if self.server.max_batch_items == 0 {
            errs.push("server.max_batch_items must be at least 1".into());
        }
        if ![401, 403].contains(&self.server.challenge_status) {
            errs.push("server.challenge_status must be 401 or 403".into());
        }

        if self.apps.is_empty() {
            errs.push("at least one [[apps]] entry is required".into());
        }
        let mut apps = Vec::new();
        for (i, a) in self.apps.iter().enumerate() {
            let at = format!("apps[{i}] ({:?})", a.id);
            if a.id.is_empty() || a.id.len() > 64 || a.id.contains(['\n', '\r']) {
                errs.push(format!(
                    "{at}: id must be 1–64 characters without line breaks"
                ));
            }
            if self.apps[..i].iter().any(|b| b.id == a.id) {
                errs.push(format!("{at}: duplicate app id"));
            }
            if !(1..=86_400_000).contains(&a.window_ms) {
                errs.push(format!("{at}: window_ms must be between 1 and 86400000"));
            }
            let secret = match (&a.secret, &a.secret_env) {
                (Some(s), None) => Some(s.clone()),
                (None, Some(var)) => match std::env::var(var) {
                    Ok(s) => Some(s),
                    Err(_) => {
                        errs.push(format!("{at}: secret_env names {var:?}, which is not set"));
                        None
                    }
                },
                (Some(_), Some(_)) => {
                    errs.push(format!("{at}: set either secret or secret_env, not both"));
                    None
                }
                (None, None) => {
                    errs.push(format!("{at}: secret or secret_env is required"));
                    None
                }
            };
            if let Some(s) = secret {
                if s.is_empty() {
                    errs.push(format!("{at}: the secret is empty"));
                }
                apps.push((a.id.clone(), s.into_bytes(), a.window_ms));
            }
        }

        let st = &self.state;
        let policies = st.policies();
        if st.backend == Backend::Redis {
            let has_url = !st.redis_url.is_empty();
            let has_cluster = !st.redis_cluster_nodes.is_empty();
            if has_url == has_cluster {
                errs.push(
                    "state.backend = \"redis\" needs exactly one of state.redis_url (one node) \
                     and state.redis_cluster_nodes (a cluster)"
                        .into(),
                );
            } else if let Err(e) = crate::redis_state::validate(&st.redis_settings()) {
                errs.push(e);
            }
            if st.redis_prefix.is_empty()
                || st
                    .redis_prefix
                    .chars()
                    .any(|c| c == '{' || c == '}' || c.is_whitespace())
            {
                errs.push("state.redis_prefix must be non-empty, without braces or spaces".into());
            }
            // A call blocks its worker for up to this long.
            if !(1..=5_000).contains(&st.redis_timeout_ms) {
                errs.push("state.redis_timeout_ms must be between 1 and 5000".into());
            }
            if !(1..=600_000).contains(&st.redis_connect_timeout_ms) {
                errs.push("state.redis_connect_timeout_ms must be between 1 and 600000".into());
            }
            if !(1..=64).contains(&st.redis_connections) {
                errs.push("state.redis_connections must be between 1 and 64".into());
            }
            if !(1..=1024).contains(&st.bloom_shards) {
                errs.push("state.bloom_shards must be between 1 and 1024".into());
            }
            if st.quota_segments > 1024 {
                errs.push("state.quota_segments must be at most 1024".into());
            }
            if !(0..=60_000).contains(&st.clock_margin_ms) {
                errs.push("state.clock_margin_ms must be between 0 and 60000".into());
            }
        }
        if policies.quotas == FailPolicy::Allow {
            errs.push(
                "state.quotas_on_error = \"allow\" is refused: a claim that cannot be recorded \
                 cannot be granted without risking overselling (set quotas_on_error = \"deny\")"
                    .into(),
            );
        }
        if st.peer_check_ms != 0 && st.peer_check_ms < 100 {
            errs.push("state.peer_check_ms must be 0 (off) or ≥ 100".into());
        }
        if st.local_fallback {
            if st.backend != Backend::Redis {
                errs.push("state.local_fallback only applies to state.backend = \"redis\"".into());
            } else if policies.nonce == FailPolicy::Deny && policies.fingerprint == FailPolicy::Deny
            {
                errs.push(
                    "state.local_fallback needs nonce_on_error or fingerprint_on_error = \"allow\" \
                     (with \"deny\", a Redis failure denies and the fallback is never used)"
                        .into(),
                );
            }
        }
        if !(st.target_fp > 0.0 && st.target_fp <= 0.01) {
            errs.push("state.target_fp must be in (0, 0.01]".into());
        }
        if st.expected_rps == 0 {
            errs.push("state.expected_rps must be at least 1".into());
        }
        let max_window = self
            .apps
            .iter()
            .map(|a| a.window_ms)
            .max()
            .unwrap_or(1)
            .max(1);
        let retention = st.nonce_retention_ms.unwrap_or(2 * max_window);
        for a in &self.apps {
            if retention < 2 * a.window_ms {
                errs.push(format!(
                    "state.nonce_retention_ms = {retention} is shorter than the acceptance span of app {:?} \
                     (2 × window_ms = {}): a request is accepted while |now − x-timestamp| ≤ {} ms, so its \
                     replay can arrive up to {} ms after the first sighting and would pass once the nonce \
                     is forgotten. Set nonce_retention_ms ≥ {} or shrink the window.",
                    a.id,
                    2 * a.window_ms,
                    a.window_ms,
                    2 * a.window_ms,
                    2 * a.window_ms
                ));
            }
        }
        let slice = st.nonce_slice_ms.unwrap_or((retention / 48).max(1));
        if slice < 1 || slice > retention.max(1) {
            errs.push("state.nonce_slice_ms must be between 1 and nonce_retention_ms".into());
        }
        let filter = SlicedBloomConfig {
            expected_rps: st.expected_rps.max(1),
            slice_ms: slice.max(1),
            retention_ms: retention,
            max_window_ms: max_window,
            target_fp: st.target_fp,
        };
        if st.nonce_mode == NonceMode::Bloom
            && st.target_fp > 0.0
            && filter.memory_bytes() > 16 * 1024 * 1024 * 1024
        {
            errs.push(format!(
                "the nonce filter would need {} MiB (expected_rps × retention); lower expected_rps or \
                 the windows",
                filter.memory_bytes() / (1024 * 1024)
            ));
        }

        if self.fingerprint.window_ms < 0 {
            errs.push("fingerprint.window_ms must be ≥ 0 (0 disables)".into());
        }
        for (i, r) in self.routes.iter().enumerate() {
            if !r.path.starts_with('/') {
                errs.push(format!("routes[{i}]: path must start with '/'"));
            }
            if r.dedup_window_ms.is_some_and(|w| w < 0) {
                errs.push(format!("routes[{i}]: dedup_window_ms must be ≥ 0"));
            }
            if let Some(w) = r.window_ms {
                if w < 1 {
                    errs.push(format!("routes[{i}]: window_ms must be ≥ 1"));
                }
            }
            if let Some(app) = &r.app {
                match self.apps.iter().find(|a| &a.id == app) {
                    None => errs.push(format!("routes[{i}]: unknown app {app:?}")),
                    Some(a) => {
                        if let Some(w) = r.window_ms.filter(|w| *w > a.window_ms) {
                            errs.push(format!(
                                "routes[{i}]: window_ms = {w} is wider than app {app:?}'s \
                                 window_ms = {}; a route can only narrow its app's window",
                                a.window_ms
                            ));
                        }
                    }
                }
            }
        }

        let dl = &self.decision_log;
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
        if !(256..=65_536).contains(&self.decision_log.record_request_max_bytes) {
            errs.push("decision_log.record_request_max_bytes must be 256–65536".into());
        }
        if let Some(dir) = &self.rules.dir {
            if !dir.is_dir() {
                errs.push(format!("rules.dir {} is not a directory", dir.display()));
            }
        }
        let r = &self.rules;
        if r.challenge_score < 1 {
            errs.push(
                "rules.challenge_score must be at least 1 (0 would challenge every request)".into(),
            );
        }
        if !(r.challenge_score <= r.review_score && r.review_score <= r.deny_score) {
            errs.push("rules: challenge_score ≤ review_score ≤ deny_score is required".into());
        }
        if self.rules.reputation_window_ms <= 0 {
            errs.push("rules.reputation_window_ms must be positive".into());
        }
        if r.reload_interval_ms < 100 {
            errs.push("rules.reload_interval_ms must be at least 100".into());
        }
        if !["json", "text"].contains(&self.log.format.as_str()) {
            errs.push("log.format must be \"json\" or \"text\"".into());
        }
        self.admin.check(&mut errs);

        if self.server.tls_cert_file.is_some() != self.server.tls_key_file.is_some() {
            errs.push(
                "server.tls_cert_file and server.tls_key_file go together: set both for HTTPS, \
                 or neither"
                    .into(),
            );
        }
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(errs));
        }
        Ok(Validated {
            raw: self.clone(),
            listen: listen.expect("checked"),
            apps,
            filter,
            retention_ms: retention,
            tls: None,
        })
    }
}

impl Config {
    /// The control plane's directory (see [`AdminConfig::state_dir`]).
    pub fn control_dir(&self) -> PathBuf {
        self.admin.state_dir.clone().unwrap_or_else(|| {
            self.decision_log
                .dir
                .parent()
                .map(|p| p.join("control"))
                .unwrap_or_else(|| PathBuf::from("control"))
        })
    }
}

/// A window wider than this draws a warning from `rampart check` and `rampart serve`.
pub const WIDE_WINDOW_MS: i64 = 60_000;

impl Validated {
    /// Reads and checks the TLS certificate and key when they are configured (parsable, the key
    /// matches the certificate), before any port is bound.
    pub fn with_tls(mut self) -> Result<Validated, ConfigError> {
        if let (Some(cert), Some(key)) = (
            &self.raw.server.tls_cert_file,
            &self.raw.server.tls_key_file,
        ) {
            self.tls = Some(
                crate::config::tls::server_config(cert, key)
                    .map_err(|e| ConfigError::Invalid(vec![e]))?,
            );
        }
        Ok(self)
    }

    /// What is allowed but probably a mistake: apps whose time window is wider than
    /// [`WIDE_WINDOW_MS`] (a captured request can be replayed that long wherever dedup is weak, and
    /// nonce retention grows with it), with the fix.
    pub fn warnings(&self) -> Vec<String> {
        self.apps
            .iter()
            .filter(|(_, _, w)| *w > WIDE_WINDOW_MS)
            .map(|(id, _, w)| {
                format!(
                    "app {id:?}: window_ms = {w} is wider than {} s; a captured request stays \
                     valid that long. Narrow the app's window, or give its sensitive routes a \
                     narrower one with [[routes]] window_ms",
                    WIDE_WINDOW_MS / 1000
                )
            })
            .collect()
    }

    /// The running configuration as the console's settings page shows it: every value that shapes
    /// decisions, and no secret (app secrets, password hashes, token hashes, ClickHouse password
    /// and credentials inside URLs are left out or cut).
    pub fn settings_view(&self) -> serde_json::Value {
        use rampart_core::redact::strip_credentials;
        use serde_json::json;
        let c = &self.raw;
        let fp = |p: FailPolicy| match p {
            FailPolicy::Deny => "deny",
            FailPolicy::Allow => "allow",
        };
        let pol = c.state.policies();
        let (backend, mode) = (
            match c.state.backend {
                Backend::Local => "local",
                Backend::Redis => "redis",
            },
            match c.state.nonce_mode {
                NonceMode::Bloom => "bloom",
                NonceMode::Exact => "exact",
            },
        );
        let rs = c.rules.settings();
        json!({
            "apps": self.apps.iter().map(|(id, _, w)| json!({"id": id, "window_ms": w})).collect::<Vec<_>>(),
            "fingerprint": {"window_ms": c.fingerprint.window_ms, "methods": c.fingerprint.methods,
                            "volatile_fields": c.fingerprint.volatile_fields},
            "routes": c.routes.iter().map(|r| json!({
                "app": r.app, "path": r.path, "window_ms": r.window_ms, "dedup_window_ms": r.dedup_window_ms,
                "methods": r.methods, "volatile_fields": r.volatile_fields,
            })).collect::<Vec<_>>(),
            "state": {
                "backend": backend, "nonce_mode": mode,
                "redis": (c.state.backend == Backend::Redis).then(|| json!({
                    "url": strip_credentials(&c.state.redis_url),
                    "cluster_nodes": c.state.redis_cluster_nodes.iter().map(|n| strip_credentials(n)).collect::<Vec<_>>(),
                    "prefix": c.state.redis_prefix,
                    "timeout_ms": c.state.redis_timeout_ms,
                    "local_fallback": c.state.local_fallback,
                    "peer_check_ms": c.state.peer_check_ms,
                })),
                "nonce_retention_ms": self.retention_ms,
                "expected_rps": c.state.expected_rps,
                "target_fp": c.state.target_fp,
                "on_store_error": {
                    "nonce": fp(pol.nonce), "fingerprint": fp(pol.fingerprint),
                    "limits": fp(pol.limits), "counters": fp(pol.counters),
                    "distinct": fp(pol.distinct), "quotas": fp(pol.quotas),
                    "reputation": fp(pol.reputation),
                },
            },
            "rules": {
                "dir": c.rules.dir, "defaults": c.rules.defaults, "reload": c.rules.reload,
                "on_error": {"edge": fp(rs.on_error[0]), "gateway": fp(rs.on_error[1]),
                             "business": fp(rs.on_error[2])},
                "challenge_score": rs.challenge_score, "review_score": rs.review_score,
                "deny_score": rs.deny_score,
            },
            "decision_log": {
                "clickhouse_url": c.decision_log.clickhouse_url.as_deref().map(strip_credentials),
                "clickhouse_database": c.decision_log.clickhouse_database,
                "dir": c.decision_log.dir, "record_request": c.decision_log.record_request,
            },
            "server": {
                "max_body_bytes": c.server.max_body_bytes,
                "max_batch_items": c.server.max_batch_items,
                "max_header_bytes": c.server.max_header_bytes,
                "max_connections": c.server.max_connections,
                "client_request_timeout_ms": c.server.client_request_timeout_ms,
                "challenge_status": c.server.challenge_status,
                "instance": c.server.instance,
                "tls": self.tls.is_some(),
                "tls_cert_file": c.server.tls_cert_file,
            },
            "admin": {
                "users": c.admin.users.iter().map(|u| json!({"name": u.name, "role": u.role})).collect::<Vec<_>>(),
                "tokens": c.admin.tokens.iter().map(|t| json!({"name": t.name, "role": t.role})).collect::<Vec<_>>(),
                "bundle_keys": c.admin.bundle_keys.iter().map(|k| json!({"name": k.name, "public_key": k.public_key})).collect::<Vec<_>>(),
                "allow_unsigned_uploads": c.admin.allow_unsigned_uploads,
                "session_ttl_ms": c.admin.session_ttl_ms,
                "canary_min_samples": c.admin.canary_min_samples,
                "canary_max_refusal_increase": c.admin.canary_max_refusal_increase,
                "canary_max_error_increase": c.admin.canary_max_error_increase,
            },
        })
    }

    pub fn engine_settings(&self) -> EngineSettings {
        let c = &self.raw;
        let upper = |v: &Vec<String>| v.iter().map(|m| m.to_ascii_uppercase()).collect();
        let default_dedup = DedupPolicy {
            window_ms: c.fingerprint.window_ms,
            methods: upper(&c.fingerprint.methods),
            volatile_fields: c.fingerprint.volatile_fields.clone(),
        };
        EngineSettings {
            apps: self
                .apps
                .iter()
                .map(|(id, secret, w)| AppPolicy::new(id.clone(), secret, *w))
                .collect(),
            routes: c
                .routes
                .iter()
                .map(|r| RoutePolicy {
                    app: r.app.clone(),
                    path: r.path.clone(),
                    window_ms: r.window_ms,
                    dedup: DedupPolicy {
                        window_ms: r.dedup_window_ms.unwrap_or(default_dedup.window_ms),
                        methods: r
                            .methods
                            .as_ref()
                            .map(upper)
                            .unwrap_or_else(|| default_dedup.methods.clone()),
                        volatile_fields: r
                            .volatile_fields
                            .clone()
                            .unwrap_or_else(|| default_dedup.volatile_fields.clone()),
                    },
                })
                .collect(),
            default_dedup,
            on_store_error: c.state.policies(),
            challenge_status: c.server.challenge_status,
        }
    }
}

fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let mut errs = Vec::new();
    for (k, v) in env {
        let Some(rest) = k.strip_prefix("RAMPART_") else {
            continue;
        };
        if NOT_OVERRIDES.contains(&k.as_str()) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        // Variables that name no section are not overrides (e.g. a secret referenced by
        // `secret_env`); a known section with an unknown key is refused by the parser.
        let Some(section) = SECTIONS
            .iter()
            .find(|s| lower.starts_with(&format!("{s}_")))
        else {
            continue;
        };
        let key = &lower[section.len() + 1..];
        let value = parse_scalar(&v);
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
        match entry.as_table_mut() {
            Some(t) => {
                t.insert(key.to_string(), value);
            }
            None => errs.push(format!(
                "environment variable {k}: [{section}] is not a table"
            )),
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(errs))
    }
}

/// An override's value: a TOML scalar or array when it parses as one, else a string.
fn parse_scalar(v: &str) -> toml::Value {
    let wrapped = format!("x = {v}");
    match wrapped.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("x")
            .unwrap_or_else(|| toml::Value::String(v.into())),
        Err(_) => toml::Value::String(v.to_string()),
    }
}

/// The embedded defaults as TOML (so the environment overrides apply to them the same way).
#[derive(serde::Serialize)]
struct EmbeddedToml {
    apps: Vec<toml::Table>,
    admin: toml::Table,
}

impl From<Config> for EmbeddedToml {
    fn from(c: Config) -> Self {
        EmbeddedToml {
            apps: c
                .apps
                .into_iter()
                .map(|a| {
                    let mut t = toml::Table::new();
                    t.insert("id".into(), a.id.into());
                    if let Some(s) = a.secret {
                        t.insert("secret".into(), s.into());
                    }
                    t.insert("window_ms".into(), a.window_ms.into());
                    t
                })
                .collect(),
            admin: toml::Table::from_iter([(
                "allow_unsigned_uploads".to_string(),
                c.admin.allow_unsigned_uploads.into(),
            )]),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("rampart-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{}.toml", xxhash_seed(text)));
        std::fs::write(&p, text).unwrap();
        Config::load_with_env(
            Some(&p),
            env.iter().map(|(a, b)| (a.to_string(), b.to_string())),
        )
    }

    fn xxhash_seed(s: &str) -> u64 {
        s.bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
    }

    #[test]
    fn embedded_defaults_validate() {
        let v = Config::load_with_env(None, std::iter::empty())
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(v.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(v.apps[0].0, "demo");
        assert_eq!(v.retention_ms, 60_000);
        // The embedded defaults are a trial set-up: unsigned uploads; a config file has to ask.
        assert!(v.raw.admin.allow_unsigned_uploads);
        let c = load("[[apps]]\nid='a'\nsecret='s'\n", &[]).unwrap();
        assert!(!c.admin.allow_unsigned_uploads);
    }

    #[test]
    fn connection_limits_are_checked() {
        let c = load(
            "[server]\nmax_header_bytes = 100\nmax_connections = 0\nclient_request_timeout_ms = 5\n\
             keep_alive_ms = 9999999\n[[apps]]\nid='a'\nsecret='s'\n",
            &[],
        )
        .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        for k in [
            "max_header_bytes",
            "max_connections",
            "client_request_timeout_ms",
            "keep_alive_ms",
        ] {
            assert!(msg.contains(&format!("server.{k}")), "{k}: {msg}");
        }
    }

    #[test]
    fn bundle_keys_are_checked() {
        let c = load(
            "[[apps]]\nid='a'\nsecret='s'\n[[admin.bundle_keys]]\nname='ci'\npublic_key='ed25519:AAAA'\n\
             [[admin.bundle_keys]]\nname='ci'\npublic_key='ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo='\n",
            &[],
        )
        .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("admin.bundle_keys \"ci\": public key: not 32 bytes"),
            "{msg}"
        );
        assert!(msg.contains("must be 1–64 characters and unique"), "{msg}");
    }

    #[test]
    fn retention_shorter_than_acceptance_span_is_refused_with_reason() {
        let c = load(
            "[[apps]]\nid='a'\nsecret='s'\nwindow_ms=3000\n[state]\nnonce_retention_ms=5000\n",
            &[],
        )
        .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("shorter than the acceptance span"), "{msg}");
        assert!(msg.contains("6000"), "{msg}");
    }

    #[test]
    fn env_overrides_apply_and_typos_are_refused() {
        let c = load(
            "[[apps]]\nid='a'\nsecret='s'\n",
            &[
                ("RAMPART_SERVER_LISTEN", "127.0.0.1:9999"),
                ("RAMPART_STATE_NONCE_MODE", "exact"),
                ("RAMPART_STATE_EXPECTED_RPS", "5000"),
                ("RAMPART_DECISION_LOG_DIR", "/tmp/x"),
                ("RAMPART_CONFIG", "ignored"),
            ],
        )
        .unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:9999");
        assert_eq!(c.state.nonce_mode, NonceMode::Exact);
        assert_eq!(c.state.expected_rps, 5000);
        assert_eq!(c.decision_log.dir, PathBuf::from("/tmp/x"));
        assert!(load(
            "[[apps]]\nid='a'\nsecret='s'\n",
            &[("RAMPART_STATE_NONCE_MOD", "x")]
        )
        .is_err());
        assert!(load(
            "[[apps]]\nid='a'\nsecret='s'\n",
            &[("RAMPART_SHOP_SECRET", "x")]
        )
        .is_ok());
        assert!(load("[server]\nlisten_typo = 1\n", &[]).is_err());
    }

    #[test]
    fn every_problem_is_reported() {
        let c = load(
            "[server]\nlisten='nope'\nchallenge_status=500\n[[apps]]\nid='a'\n[[apps]]\nid='a'\nsecret='x'\nwindow_ms=0\n",
            &[],
        )
        .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        for needle in [
            "server.listen",
            "challenge_status",
            "secret or secret_env",
            "duplicate app id",
            "window_ms",
        ] {
            assert!(msg.contains(needle), "{needle} missing in {msg}");
        }
    }

    #[test]
    fn route_windows_only_narrow_and_wide_windows_are_warned_about() {
        let base = "[[apps]]\nid='a'\nsecret='x'\nwindow_ms=5000\n\
                    [[apps]]\nid='b'\nsecret='y'\nwindow_ms=120000\n";
        let wider = format!("{base}[[routes]]\napp='a'\npath='/pay'\nwindow_ms=6000\n");
        let msg = load(&wider, &[])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("routes[0]: window_ms = 6000 is wider than app \"a\""),
            "{msg}"
        );
        let zero = format!("{base}[[routes]]\npath='/pay'\nwindow_ms=0\n");
        let msg = load(&zero, &[])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("routes[0]: window_ms must be ≥ 1"), "{msg}");

        let ok = format!("{base}[[routes]]\napp='b'\npath='/pay/*'\nwindow_ms=2000\n");
        let v = load(&ok, &[]).unwrap().validate().unwrap();
        assert_eq!(v.engine_settings().routes[0].window_ms, Some(2000));
        // Only app b's two-minute window is called out, with the fix.
        let w = v.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("app \"b\"") && w[0].contains("[[routes]] window_ms"),
            "{w:?}"
        );
        assert!(Config::embedded().validate().unwrap().warnings().is_empty());
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let c = Config::embedded();
        assert!(!format!("{c:?}").contains(DEMO_SECRET));
    }
}
