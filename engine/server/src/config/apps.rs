//! `[[apps]]`: each calling application's id, signing keys (a plain secret, inline or from the
//! environment, and/or a `keys` list with ids and validity bounds) and time window.

use rampart_core::replay::keys::{self, Keyring, SigningKey, DEFAULT_KEY_ID, MAX_KEYS};
use serde::Deserialize;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    pub id: String,
    /// The key `default` (inline).
    #[serde(default)]
    pub secret: Option<String>,
    /// The key `default`, from this environment variable.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Further keys, with ids and optional validity bounds.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    #[serde(default = "default_window_ms")]
    pub window_ms: i64,
    /// Peak accepted requests per second of this app, which its own nonce filter is sized for.
    /// Default: `[state] expected_rps`.
    #[serde(default)]
    pub expected_rps: Option<u64>,
    /// Cap on this app's live entries in exact nonce mode. Default: `[state] exact_max_entries`.
    #[serde(default)]
    pub exact_max_entries: Option<usize>,
    /// Cap on this app's live duplicate-submission fingerprints. Default:
    /// `[state] fingerprint_max_entries`.
    #[serde(default)]
    pub fingerprint_max_entries: Option<usize>,
    /// Browser traffic behind forward-auth: a request with none of the anti-replay headers is
    /// judged by the rules alone instead of being refused `SIGNATURE_MISSING`.
    #[serde(default)]
    pub accept_unsigned: bool,
}

/// `[[apps]] keys = [{ id, secret | secret_env, not_before_ms, not_after_ms }]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub id: String,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Unix ms: the key is refused before this server time (inclusive bound).
    #[serde(default)]
    pub not_before_ms: Option<i64>,
    /// Unix ms: the key is refused after this server time (inclusive bound).
    #[serde(default)]
    pub not_after_ms: Option<i64>,
}

impl std::fmt::Debug for AppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppConfig")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_env", &self.secret_env)
            .field("keys", &self.keys)
            .field("window_ms", &self.window_ms)
            .field("expected_rps", &self.expected_rps)
            .field("exact_max_entries", &self.exact_max_entries)
            .field("fingerprint_max_entries", &self.fingerprint_max_entries)
            .field("accept_unsigned", &self.accept_unsigned)
            .finish()
    }
}

impl std::fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyConfig")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_env", &self.secret_env)
            .field("not_before_ms", &self.not_before_ms)
            .field("not_after_ms", &self.not_after_ms)
            .finish()
    }
}

fn default_window_ms() -> i64 {
    5_000
}

/// A validated app: its id, its configured keys (the plain secret first, as `default`, then the
/// `keys` list in order: oldest first) and its window.
#[derive(Clone)]
pub struct ValidApp {
    pub id: String,
    pub keys: Vec<ValidKey>,
    pub window_ms: i64,
    pub accept_unsigned: bool,
}

/// A configured key with its secret read.
#[derive(Clone)]
pub struct ValidKey {
    pub id: String,
    pub secret: Vec<u8>,
    pub not_before_ms: Option<i64>,
    pub not_after_ms: Option<i64>,
}

impl std::fmt::Debug for ValidApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidApp")
            .field("id", &self.id)
            .field(
                "keys",
                &self.keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(),
            )
            .field("window_ms", &self.window_ms)
            .field("accept_unsigned", &self.accept_unsigned)
            .finish()
    }
}

impl ValidKey {
    pub fn signing_key(&self) -> SigningKey {
        SigningKey::new(
            &self.id,
            &self.secret,
            self.not_before_ms,
            self.not_after_ms,
        )
    }
}

impl ValidApp {
    /// The configured keys as a keyring (checked by `validate`).
    pub fn keyring(&self) -> Keyring {
        Keyring::new(self.keys.iter().map(ValidKey::signing_key).collect(), [])
            .expect("keys checked by validate")
    }

    /// The secret of key `id`, or of the only key when `id` is `None` (the `default` key when
    /// there are several).
    pub fn secret(&self, id: Option<&str>) -> Result<&[u8], String> {
        let found = match id {
            Some(id) => self.keys.iter().find(|k| k.id == id),
            None if self.keys.len() == 1 => self.keys.first(),
            None => self.keys.iter().find(|k| k.id == DEFAULT_KEY_ID),
        };
        found.map(|k| k.secret.as_slice()).ok_or_else(|| {
            let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
            match id {
                Some(id) => format!(
                    "app {:?} has no key {id:?} (keys: {})",
                    self.id,
                    ids.join(", ")
                ),
                None => format!(
                    "app {:?} has several keys ({}): choose one with --key-id",
                    self.id,
                    ids.join(", ")
                ),
            }
        })
    }
}

/// A secret given inline or through an environment variable; problems go into `errs`.
fn read_secret(
    at: &str,
    secret: &Option<String>,
    secret_env: &Option<String>,
    errs: &mut Vec<String>,
) -> Option<Vec<u8>> {
    let s = match (secret, secret_env) {
        (Some(s), None) => s.clone(),
        (None, Some(var)) => match std::env::var(var) {
            Ok(s) => s,
            Err(_) => {
                errs.push(format!("{at}: secret_env names {var:?}, which is not set"));
                return None;
            }
        },
        (Some(_), Some(_)) => {
            errs.push(format!("{at}: set either secret or secret_env, not both"));
            return None;
        }
        (None, None) => return None,
    };
    if s.is_empty() {
        errs.push(format!("{at}: the secret is empty"));
    }
    Some(s.into_bytes())
}

/// Checks every `[[apps]]` entry; every problem goes into `errs`. Returns each app whose keys
/// could all be read.
pub(super) fn check(apps: &[AppConfig], errs: &mut Vec<String>) -> Vec<ValidApp> {
    if apps.is_empty() {
        errs.push("at least one [[apps]] entry is required".into());
    }
    let mut out = Vec::new();
    for (i, a) in apps.iter().enumerate() {
        let at = format!("apps[{i}] ({:?})", a.id);
        let before = errs.len();
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
        if a.expected_rps == Some(0) {
            errs.push(format!("{at}: expected_rps must be at least 1"));
        }
        if a.exact_max_entries == Some(0) || a.fingerprint_max_entries == Some(0) {
            errs.push(format!(
                "{at}: exact_max_entries and fingerprint_max_entries must be at least 1"
            ));
        }
        let mut keys = Vec::new();
        let plain = a.secret.is_some() || a.secret_env.is_some();
        if !plain && a.keys.is_empty() {
            errs.push(format!(
                "{at}: secret or secret_env is required (or a keys list)"
            ));
        }
        if plain {
            if let Some(secret) = read_secret(&at, &a.secret, &a.secret_env, errs) {
                keys.push(ValidKey {
                    id: DEFAULT_KEY_ID.into(),
                    secret,
                    not_before_ms: None,
                    not_after_ms: None,
                });
            }
        }
        for (j, k) in a.keys.iter().enumerate() {
            let kat = format!("{at}: keys[{j}] ({:?})", k.id);
            if !keys::valid_key_id(&k.id) {
                errs.push(format!(
                    "{kat}: id must be 1–64 characters of [A-Za-z0-9._-]"
                ));
            }
            if k.id == DEFAULT_KEY_ID && plain {
                errs.push(format!(
                    "{kat}: the app's plain secret is the key \"default\"; give this key another id"
                ));
            } else if a.keys[..j].iter().any(|o| o.id == k.id) {
                errs.push(format!("{kat}: duplicate key id"));
            }
            if k.secret.is_none() && k.secret_env.is_none() {
                errs.push(format!("{kat}: secret or secret_env is required"));
            }
            for (name, v) in [
                ("not_before_ms", k.not_before_ms),
                ("not_after_ms", k.not_after_ms),
            ] {
                if v.is_some_and(|t| t < 0) {
                    errs.push(format!("{kat}: {name} must be a Unix time in ms (≥ 0)"));
                }
            }
            if let (Some(nb), Some(na)) = (k.not_before_ms, k.not_after_ms) {
                if nb >= na {
                    errs.push(format!(
                        "{kat}: not_before_ms ({nb}) must be before not_after_ms ({na})"
                    ));
                }
            }
            if let Some(secret) = read_secret(&kat, &k.secret, &k.secret_env, errs) {
                keys.push(ValidKey {
                    id: k.id.clone(),
                    secret,
                    not_before_ms: k.not_before_ms,
                    not_after_ms: k.not_after_ms,
                });
            }
        }
        if keys.len() > MAX_KEYS {
            errs.push(format!(
                "{at}: {} keys; an app holds at most {MAX_KEYS} (retire old ones)",
                keys.len()
            ));
        }
        if errs.len() == before {
            out.push(ValidApp {
                id: a.id.clone(),
                keys,
                window_ms: a.window_ms,
                accept_unsigned: a.accept_unsigned,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(toml_text: &str) -> AppConfig {
        toml::from_str(toml_text).unwrap()
    }

    fn problems(a: &AppConfig) -> Vec<String> {
        let mut errs = Vec::new();
        check(std::slice::from_ref(a), &mut errs);
        errs
    }

    #[test]
    fn a_plain_secret_is_the_key_default_and_keys_follow_it_in_order() {
        let mut errs = Vec::new();
        let apps = check(
            &[app(
                "id = 'shop'\nsecret = 's0'\nkeys = [{ id = 'k2', secret = 's2', not_before_ms = 5 }, \
                 { id = 'k3', secret = 's3', not_after_ms = 9 }]\n",
            )],
            &mut errs,
        );
        assert!(errs.is_empty(), "{errs:?}");
        let ids: Vec<&str> = apps[0].keys.iter().map(|k| k.id.as_str()).collect();
        assert_eq!(ids, ["default", "k2", "k3"]);
        assert_eq!(apps[0].keys[1].not_before_ms, Some(5));
        assert_eq!(apps[0].secret(None).unwrap(), b"s0");
        assert_eq!(apps[0].secret(Some("k3")).unwrap(), b"s3");
        assert!(apps[0].secret(Some("k9")).unwrap_err().contains("k2, k3"));
        let only = check(
            &[app("id = 'a'\nkeys = [{ id = 'k1', secret = 'x' }]\n")],
            &mut errs,
        );
        assert_eq!(only[0].secret(None).unwrap(), b"x");
        assert_eq!(only[0].keyring().keys().len(), 1);
        assert!(!format!("{:?}", only[0]).contains("\"x\""));
    }

    #[test]
    fn bad_keys_are_refused_with_their_place() {
        let e = problems(&app(
            "id = 'shop'\nsecret = 's0'\nkeys = [{ id = 'default', secret = 'x' }, \
             { id = 'k 2', secret = 'x' }, { id = 'k3' }, { id = 'k4', secret = '' }, \
             { id = 'k5', secret = 'x', not_before_ms = 9, not_after_ms = 9 }, \
             { id = 'k6', secret = 'x' }, { id = 'k6', secret_env = 'RAMPART_TEST_UNSET_KEY' }, \
             { id = 'k7', secret = 'x', secret_env = 'X' }, { id = 'k8', secret = 'x', not_after_ms = -1 }]\n",
        ));
        let want = [
            "apps[0] (\"shop\"): keys[0] (\"default\"): the app's plain secret is the key \"default\"",
            "apps[0] (\"shop\"): keys[1] (\"k 2\"): id must be 1–64 characters of [A-Za-z0-9._-]",
            "apps[0] (\"shop\"): keys[2] (\"k3\"): secret or secret_env is required",
            "apps[0] (\"shop\"): keys[3] (\"k4\"): the secret is empty",
            "apps[0] (\"shop\"): keys[4] (\"k5\"): not_before_ms (9) must be before not_after_ms (9)",
            "apps[0] (\"shop\"): keys[6] (\"k6\"): duplicate key id",
            "apps[0] (\"shop\"): keys[6] (\"k6\"): secret_env names \"RAMPART_TEST_UNSET_KEY\", which is not set",
            "apps[0] (\"shop\"): keys[7] (\"k7\"): set either secret or secret_env, not both",
            "apps[0] (\"shop\"): keys[8] (\"k8\"): not_after_ms must be a Unix time in ms (≥ 0)",
        ];
        for w in want {
            assert!(e.iter().any(|p| p.starts_with(w)), "{w}\n in {e:#?}");
        }
        let many: Vec<String> = (0..9)
            .map(|i| format!("{{ id = 'k{i}', secret = 'x' }}"))
            .collect();
        let e = problems(&app(&format!("id = 'a'\nkeys = [{}]\n", many.join(", "))));
        assert_eq!(
            e,
            ["apps[0] (\"a\"): 9 keys; an app holds at most 8 (retire old ones)"]
        );
        let e = problems(&app("id = 'a'\n"));
        assert_eq!(
            e,
            ["apps[0] (\"a\"): secret or secret_env is required (or a keys list)"]
        );
        assert!(
            toml::from_str::<AppConfig>("id = 'a'\nkeys = [{ id = 'k', secrt = 'x' }]\n").is_err()
        );
    }
}
