//! Configuration: one TOML file, `RAMPART_<SECTION>_<KEY>` environment overrides, validated as a
//! whole before any port is bound. Every key is documented in `docs/config.md`.
//!
//! One file per section, each with its struct, defaults and validator: [`server`], [`apps`],
//! [`state`], [`fingerprint`] (with `[[routes]]`), [`decision_log`], [`rules`], [`waf`],
//! [`challenge`], [`admin`], [`log`]. [`env`] applies the environment overrides; [`summary`] is what a validated
//! configuration prints about itself (`rampart check`, the console's settings page).
//! [`Config::validate`] runs the section validators in a fixed order into one list of problems.

mod admin;
mod apps;
mod challenge;
mod decision_log;
mod env;
mod fingerprint;
mod log;
mod rules;
mod server;
mod state;
mod summary;
pub(crate) mod tls;
mod waf;

use std::net::SocketAddr;
use std::path::PathBuf;

use rampart_core::engine::EngineSettings;
use rampart_core::policy::{AppPolicy, DedupPolicy, RoutePolicy};
use rampart_core::replay::bloom::SlicedBloomConfig;
use serde::Deserialize;

pub use admin::{AdminConfig, AdminToken, AdminUser, BundleKey, DEFAULT_AUDIT_MAX};
pub use apps::{AppConfig, KeyConfig, ValidApp, ValidKey};
pub use challenge::{BindTo, ChallengeSettings};
pub use decision_log::{DecisionLogConfig, SpoolFull};
pub use fingerprint::{FingerprintConfig, RouteConfig};
pub use log::LogConfig;
pub use rules::RulesConfig;
pub use server::{OutcomeAuth, ServerConfig};
pub use state::{Backend, NonceMode, OnStoreError, StateConfig};
pub use summary::WIDE_WINDOW_MS;
pub use waf::{WafConfig, DEBIAN_CRS_DIR};

/// The secret of the `demo` app of the embedded defaults. For local trials only.
pub const DEMO_SECRET: &str = "demo-secret";

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
    pub waf: WafConfig,
    #[serde(default)]
    pub challenge: ChallengeSettings,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub admin: AdminConfig,
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
    pub apps: Vec<ValidApp>,
    pub filter: SlicedBloomConfig,
    pub retention_ms: i64,
    /// The TLS settings when `[server] tls_cert_file` and `tls_key_file` are set, read by
    /// [`Validated::with_tls`] (`serve` and `check` only: other commands never need the key).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// The compiled CRS when `[waf]` runs one, read by [`Validated::with_crs`] (`serve`,
    /// `check`: other commands never need it).
    pub crs: Option<std::sync::Arc<rampart_core::waf::crs::Crs>>,
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
                keys: Vec::new(),
                // Generous so that a hand-typed curl from the README fits; tighten in production.
                window_ms: 30_000,
                expected_rps: None,
                exact_max_entries: None,
                fingerprint_max_entries: None,
                accept_unsigned: false,
            }],
            state: StateConfig::default(),
            fingerprint: FingerprintConfig::default(),
            routes: Vec::new(),
            decision_log: DecisionLogConfig::default(),
            rules: RulesConfig::default(),
            waf: WafConfig::default(),
            challenge: ChallengeSettings::default(),
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
                toml::Table::try_from(env::EmbeddedToml::from(Config::embedded()))
                    .expect("embedded defaults serialise"),
            ),
        };
        env::apply_env(&mut table, env)?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: name,
                message: e.to_string(),
            })
    }

    /// Checks everything and derives the values the server needs. Collects every problem, section
    /// by section in a fixed order (the order `rampart check` prints them in).
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let mut errs = Vec::new();
        let listen = self.server.check(&mut errs);
        let apps = apps::check(&self.apps, &mut errs);
        let state = self.state.check(&self.apps, &mut errs);
        fingerprint::check(&self.fingerprint, &self.routes, &self.apps, &mut errs);
        self.decision_log.check(&mut errs);
        self.rules.check(&mut errs);
        self.waf.check(&mut errs);
        self.challenge.check(&mut errs);
        self.log.check(&mut errs);
        self.admin.check(&mut errs);
        self.server.check_tls_pair(&mut errs);
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(errs));
        }
        Ok(Validated {
            raw: self.clone(),
            listen: listen.expect("checked"),
            apps,
            filter: state.filter,
            retention_ms: state.retention_ms,
            tls: None,
            crs: None,
        })
    }
}

impl Config {
    /// Where the local anti-replay stores are saved across restarts (`[state] snapshot_dir`).
    /// Default: beside the decision log's directory, named after it (`rampart-data/decisions`
    /// → `rampart-data/decisions.replay`): one per instance, as the decision log's directory is
    /// (each is locked by its process), while instances on one host may share the control
    /// plane's directory.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.state.snapshot_dir.clone().unwrap_or_else(|| {
            let log = &self.decision_log.dir;
            let name = log
                .file_name()
                .map(|n| format!("{}.replay", n.to_string_lossy()))
                .unwrap_or_else(|| "replay".into());
            log.with_file_name(name)
        })
    }

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

impl Validated {
    /// Reads and compiles the OWASP CRS when `[waf]` runs one, before any port is bound; a rule
    /// file that does not compile is a configuration error naming its file and line.
    pub fn with_crs(mut self) -> Result<Validated, ConfigError> {
        self.crs = self.raw.waf.load().map_err(ConfigError::Invalid)?;
        Ok(self)
    }

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

    /// The raw `[[apps]]` entry of `app`.
    fn app_config(&self, app: &str) -> Option<&AppConfig> {
        self.raw.apps.iter().find(|a| a.id == app)
    }

    /// The nonce filter of one app: the shared shape (slices, retention, windows), sized for the
    /// app's own `expected_rps`.
    pub fn filter_for(&self, app: &str) -> SlicedBloomConfig {
        SlicedBloomConfig {
            expected_rps: self
                .app_config(app)
                .and_then(|a| a.expected_rps)
                .unwrap_or(self.filter.expected_rps),
            ..self.filter
        }
    }

    /// The cap on `app`'s live entries in exact nonce mode.
    pub fn exact_max_entries_for(&self, app: &str) -> usize {
        self.app_config(app)
            .and_then(|a| a.exact_max_entries)
            .unwrap_or(self.raw.state.exact_max_entries)
    }

    /// The cap on `app`'s live duplicate-submission fingerprints.
    pub fn fingerprint_max_entries_for(&self, app: &str) -> usize {
        self.app_config(app)
            .and_then(|a| a.fingerprint_max_entries)
            .unwrap_or(self.raw.state.fingerprint_max_entries)
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
                .map(|a| {
                    AppPolicy::with_keys(a.id.clone(), a.keyring(), a.window_ms)
                        .accepting_unsigned(a.accept_unsigned)
                })
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
        assert_eq!(v.apps[0].id, "demo");
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
    fn replica_acks_are_checked() {
        let local = load(
            "[[apps]]\nid='a'\nsecret='s'\n[state]\nreplica_acks=1\n",
            &[],
        )
        .unwrap();
        let msg = local.validate().unwrap_err().to_string();
        assert!(msg.contains("state.replica_acks only applies"), "{msg}");
        let redis = |extra: &str| {
            load(
                &format!(
                    "[[apps]]\nid='a'\nsecret='s'\n[state]\nbackend='redis'\n\
                     redis_url='redis://127.0.0.1:6379'\n{extra}"
                ),
                &[],
            )
            .unwrap()
            .validate()
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert_eq!(redis("replica_acks=1\n"), Ok(()));
        let msg = redis("replica_acks=1\nreplica_ack_timeout_ms=200\nredis_timeout_ms=200\n")
            .unwrap_err();
        assert!(
            msg.contains("replica_ack_timeout_ms must be at least 1 and below"),
            "{msg}"
        );
        let msg = redis("replica_acks=17\n").unwrap_err();
        assert!(
            msg.contains("replica_acks must be between 0 and 16"),
            "{msg}"
        );
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
    fn problems_are_reported_section_by_section_in_a_fixed_order() {
        let c = load(
            "[server]\nlisten='x'\ntls_cert_file='a.pem'\n[[apps]]\nid='a'\n[state]\ntarget_fp=0.5\n\
             [fingerprint]\nwindow_ms=-1\n[decision_log]\nmax_files=0\n[rules]\nreload_interval_ms=5\n\
             [log]\nformat='xml'\n[admin]\npoll_ms=1\n",
            &[],
        )
        .unwrap();
        let Err(ConfigError::Invalid(errs)) = c.validate() else {
            panic!("invalid configuration expected");
        };
        let want = [
            "server.listen \"x\" is not an address like 127.0.0.1:8080",
            "apps[0] (\"a\"): secret or secret_env is required (or a keys list)",
            "state.target_fp must be in (0, 0.01]",
            "fingerprint.window_ms must be ≥ 0 (0 disables)",
            "decision_log.max_files and queue_size must be at least 1",
            "rules.reload_interval_ms must be at least 100",
            "log.format must be \"json\" or \"text\"",
            "admin.poll_ms must be 50–60000",
            "server.tls_cert_file and server.tls_key_file go together: set both for HTTPS, or neither",
        ];
        assert_eq!(errs, want);
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
