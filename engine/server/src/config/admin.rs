//! `[admin]`: users, API tokens, sessions, login throttling, canary guards and the trusted keys of
//! signed rule bundles.

use std::path::PathBuf;

use serde::Deserialize;

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
    /// Entries the live audit log keeps; older ones move to export files (nothing is dropped).
    pub audit_max_entries: usize,
    /// Rule set versions kept compiled besides the live one (least recently used goes first).
    pub compiled_versions: usize,
    /// Public keys whose signed rule bundles `POST /admin/v1/rulesets` accepts.
    pub bundle_keys: Vec<BundleKey>,
    /// Dev mode: also accept unsigned uploads (and stage them). On in the embedded defaults only.
    pub allow_unsigned_uploads: bool,
    /// Four eyes for signing keys: a key added through the admin API stays pending (refused)
    /// until a second admin approves it. Retiring a key never waits.
    pub key_approval: bool,
}

/// Entries the live audit log keeps unless `audit_max_entries` says otherwise.
pub const DEFAULT_AUDIT_MAX: usize = 100_000;

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
            compiled_versions: 4,
            audit_max_entries: DEFAULT_AUDIT_MAX,
            bundle_keys: Vec::new(),
            allow_unsigned_uploads: false,
            key_approval: false,
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

    /// Checks `[admin]`; every problem goes into `errs`.
    pub(super) fn check(&self, errs: &mut Vec<String>) {
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
        if self.audit_max_entries < 10 {
            errs.push("admin.audit_max_entries must be ≥ 10".into());
        }
        if !(1..=64).contains(&self.compiled_versions) {
            errs.push("admin.compiled_versions must be 1–64".into());
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
