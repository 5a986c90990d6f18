//! `[[apps]]`: each calling application's id, secret (inline or from the environment) and time
//! window.

use serde::Deserialize;

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

/// Checks every `[[apps]]` entry; every problem goes into `errs`. Returns (id, secret, window_ms)
/// of each app whose secret could be read.
pub(super) fn check(apps: &[AppConfig], errs: &mut Vec<String>) -> Vec<(String, Vec<u8>, i64)> {
    if apps.is_empty() {
        errs.push("at least one [[apps]] entry is required".into());
    }
    let mut out = Vec::new();
    for (i, a) in apps.iter().enumerate() {
        let at = format!("apps[{i}] ({:?})", a.id);
        if a.id.is_empty() || a.id.len() > 64 || a.id.contains(['\n', '\r']) {
            errs.push(format!(
                "{at}: id must be 1–64 characters without line breaks"
            ));
        }
        if apps[..i].iter().any(|b| b.id == a.id) {
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
            out.push((a.id.clone(), s.into_bytes(), a.window_ms));
        }
    }
    out
}
