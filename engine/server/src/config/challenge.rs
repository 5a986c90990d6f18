//! `[challenge]`: proof-of-work challenges (DESIGN §3.1) — the difficulty rules get by default,
//! how long a challenge and a clearance last, what they are bound to, and the MAC keys.

use rampart_core::challenge::{Binding, MAX_DIFFICULTY};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BindTo {
    /// The device id when the request has one, else the client IP.
    #[default]
    DeviceOrIp,
    /// The client IP only.
    Ip,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChallengeSettings {
    /// Leading zero bits of `challenge(reason)` and of score-based challenges.
    pub difficulty: u8,
    /// How long an issued challenge may be solved.
    pub ttl_ms: i64,
    /// How long a clearance lets its subject through.
    pub clearance_ttl_ms: i64,
    pub bind: BindTo,
    /// The MAC key's secret (at least 32 bytes), or the variable holding it. Absent: a key
    /// derived from the control plane's session key, which every instance sharing the control
    /// store (Redis, or one control directory) shares.
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    /// The key being rotated out: challenges and clearances it made still verify.
    pub previous_secret: Option<String>,
    pub previous_secret_env: Option<String>,
}

impl std::fmt::Debug for ChallengeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChallengeSettings")
            .field("difficulty", &self.difficulty)
            .field("ttl_ms", &self.ttl_ms)
            .field("clearance_ttl_ms", &self.clearance_ttl_ms)
            .field("bind", &self.bind)
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("secret_env", &self.secret_env)
            .field(
                "previous_secret",
                &self.previous_secret.as_ref().map(|_| "…"),
            )
            .field("previous_secret_env", &self.previous_secret_env)
            .finish()
    }
}

impl Default for ChallengeSettings {
    fn default() -> Self {
        let d = rampart_core::challenge::ChallengeConfig::default();
        ChallengeSettings {
            difficulty: d.difficulty,
            ttl_ms: d.ttl_ms,
            clearance_ttl_ms: d.clearance_ttl_ms,
            bind: BindTo::DeviceOrIp,
            secret: None,
            secret_env: None,
            previous_secret: None,
            previous_secret_env: None,
        }
    }
}

/// A key from a configured secret (domain-separated: the same secret used elsewhere gives
/// another key).
fn key_of(secret: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::new()
        .chain_update(b"rampart-challenge-key\0")
        .chain_update(secret.as_bytes())
        .finalize()
        .into()
}

fn read(value: &Option<String>, env: &Option<String>) -> Option<Result<String, String>> {
    match (value, env) {
        (Some(v), _) => Some(Ok(v.clone())),
        (None, Some(var)) => {
            Some(std::env::var(var).map_err(|_| format!("challenge: ${var} is not set")))
        }
        (None, None) => None,
    }
}

impl ChallengeSettings {
    pub(super) fn check(&self, errs: &mut Vec<String>) {
        if !(1..=MAX_DIFFICULTY).contains(&self.difficulty) {
            errs.push(format!(
                "challenge.difficulty must be 1 to {MAX_DIFFICULTY}"
            ));
        }
        if !(1_000..=86_400_000).contains(&self.ttl_ms) {
            errs.push("challenge.ttl_ms must be 1000 to 86400000".into());
        }
        if !(1_000..=30 * 86_400_000).contains(&self.clearance_ttl_ms) {
            errs.push("challenge.clearance_ttl_ms must be 1000 to 2592000000 (30 days)".into());
        }
        for (name, v, e) in [
            ("secret", &self.secret, &self.secret_env),
            (
                "previous_secret",
                &self.previous_secret,
                &self.previous_secret_env,
            ),
        ] {
            if v.is_some() && e.is_some() {
                errs.push(format!("challenge: set {name} or {name}_env, not both"));
            }
            match read(v, e) {
                Some(Ok(s)) if s.len() < 32 => {
                    errs.push(format!("challenge.{name} must be at least 32 bytes"))
                }
                Some(Err(m)) => errs.push(m),
                _ => {}
            }
        }
        if self.secret.is_none()
            && self.secret_env.is_none()
            && (self.previous_secret.is_some() || self.previous_secret_env.is_some())
        {
            errs.push("challenge: previous_secret needs secret".into());
        }
    }

    /// The engine's settings: keys from the configured secrets, else from `session_key`.
    pub fn engine_config(&self, session_key: &[u8]) -> rampart_core::challenge::ChallengeConfig {
        let mut keys: Vec<[u8; 32]> = [
            read(&self.secret, &self.secret_env),
            read(&self.previous_secret, &self.previous_secret_env),
        ]
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|s| key_of(&s))
        .collect();
        if keys.is_empty() {
            use hmac::Mac;
            let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(session_key)
                .expect("any key length");
            m.update(b"rampart-challenge-key");
            keys.push(m.finalize().into_bytes().into());
        }
        let mut seed = [0u8; 8];
        let _ = getrandom::getrandom(&mut seed);
        rampart_core::challenge::ChallengeConfig {
            keys,
            difficulty: self.difficulty,
            ttl_ms: self.ttl_ms,
            clearance_ttl_ms: self.clearance_ttl_ms,
            binding: match self.bind {
                BindTo::DeviceOrIp => Binding::DeviceOrIp,
                BindTo::Ip => Binding::Ip,
            },
            seed: u64::from_le_bytes(seed),
        }
    }
}
