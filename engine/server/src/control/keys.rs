//! Signing keys added and retired at run time (`/admin/v1/apps/{app}/keys`), kept in the rollout
//! state so every instance applies a change within `[admin] poll_ms`.
//!
//! An app's keyring is its configured keys (the plain secret as `default`, then `keys` in
//! order), then the keys added here (oldest first), less every id retired here. A retired key
//! keeps only its id (its secret is wiped from the state), so a request that names it in
//! `x-key-id` is told it was retired, and the id is never used again. Secrets are stored in the
//! control store (the state file, owner-only, or Redis) and shown once, in the answer that
//! creates them; never in an audit entry, a listing or a log line.
//!
//! With `[admin] key_approval = true`, a key added here stays pending (not accepted) until a
//! second admin approves it. Retiring needs no second person: after a leak it must take effect at
//! once.

use rampart_core::replay::keys::{self, Keyring, SigningKey, MAX_KEYS, MAX_RETIRED};
use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::{conflict, Control, ControlState, Host};
use crate::auth::Principal;
use crate::clock::now_ms;
use crate::config::ValidApp;
use crate::error::ApiError;

/// A secret kept in the control store: serialised as it is, never printed.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StoredSecret(String);

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A key added or retired through the admin API.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyEntry {
    pub app: String,
    pub id: String,
    /// `api` (added here) or `config` (a configured key, recorded here only when retired).
    pub source: String,
    /// The secret while the key is in use; wiped when it is retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<StoredSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after_ms: Option<i64>,
    pub by: String,
    pub created_ms: i64,
    /// Waiting for a second admin (`[admin] key_approval`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_by: Option<String>,
}

impl KeyEntry {
    fn live(&self) -> bool {
        self.retired_ms.is_none()
    }
}

/// `POST /admin/v1/apps/{app}/keys`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NewKey {
    /// 1–64 characters of `[A-Za-z0-9._-]`; default: `k` and the creation time in ms.
    pub id: Option<String>,
    /// Give the secret yourself (at least 16 characters); default: 32 random bytes, as 64 hex
    /// characters, shown once in the answer.
    pub secret: Option<String>,
    pub not_before_ms: Option<i64>,
    pub not_after_ms: Option<i64>,
}

/// The answer to `POST /admin/v1/apps/{app}/keys`: the only place a generated secret is shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedKey {
    pub app: String,
    pub id: String,
    /// The generated secret (absent when the request gave one). Shown this once: it cannot be
    /// read back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub not_before_ms: Option<i64>,
    pub not_after_ms: Option<i64>,
    /// `active`, `not_yet_valid` or `pending` (waiting for a second admin).
    pub state: &'static str,
}

/// The answer to `DELETE /admin/v1/apps/{app}/keys/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RetiredKey {
    pub app: String,
    pub retired: String,
    /// Set when the app has no key valid now: every request of the app is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(400, "INVALID_FIELD", msg)
}

fn not_found(app: &str, id: &str) -> ApiError {
    ApiError::new(
        404,
        "KEY_NOT_FOUND",
        format!("app {app:?} has no key {id:?}"),
    )
}

/// An app's keyring: its configured keys less those retired here, then the live keys added here
/// (pending ones excluded), oldest first; every id retired here is remembered.
pub fn keyring(app: &ValidApp, entries: &[KeyEntry]) -> Keyring {
    let mine = || entries.iter().filter(|e| e.app == app.id);
    let retired = |id: &str| mine().any(|e| e.id == id && !e.live());
    let mut keys: Vec<SigningKey> = app
        .keys
        .iter()
        .filter(|k| !retired(&k.id))
        .map(|k| k.signing_key())
        .collect();
    for e in mine().filter(|e| e.live() && !e.pending) {
        let Some(secret) = &e.secret else { continue };
        if keys.len() < MAX_KEYS && !keys.iter().any(|k| k.id() == e.id) {
            keys.push(SigningKey::new(
                &e.id,
                secret.0.as_bytes(),
                e.not_before_ms,
                e.not_after_ms,
            ));
        }
    }
    let mut gone: Vec<&KeyEntry> = mine().filter(|e| !e.live()).collect();
    gone.sort_by_key(|e| e.retired_ms);
    Keyring::new(keys, gone.iter().map(|e| e.id.clone())).unwrap_or_else(|e| {
        // The API never stores such a state; a hand-edited store falls back to the configuration.
        tracing::error!(app = %app.id, error = %e, "stored keys are inconsistent; using the configured keys");
        app.keyring()
    })
}

/// Hash of an app's key ids and states (the audit log's before/after; no secret goes in).
fn ids_hash(app: &str, entries: &[KeyEntry]) -> String {
    let ids: Vec<(&str, bool, bool)> = entries
        .iter()
        .filter(|e| e.app == app)
        .map(|e| (e.id.as_str(), e.live(), e.pending))
        .collect();
    let body = serde_json::to_vec(&ids).unwrap_or_default();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&body))
}

fn generate_secret() -> Result<String, ApiError> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b)
        .map_err(|e| ApiError::new(503, "RANDOM_UNAVAILABLE", e.to_string()))?;
    Ok(hex::encode(b))
}

impl Control {
    /// The configured app `app`, or 404.
    fn key_app<'h>(rt: &'h Host<'_>, app: &str) -> Result<&'h ValidApp, ApiError> {
        rt.config
            .apps
            .iter()
            .find(|a| a.id == app)
            .ok_or_else(|| ApiError::new(404, "UNKNOWN_APP", format!("unknown app {app:?}")))
    }

    /// Adds a key to `app`; the answer holds the generated secret (shown once).
    pub fn add_key(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        app: &str,
        k: NewKey,
    ) -> Result<CreatedKey, ApiError> {
        let cfg = Self::key_app(rt, app)?;
        let now = now_ms();
        let id = k.id.clone().unwrap_or_else(|| format!("k{now}"));
        if !keys::valid_key_id(&id) {
            return Err(invalid("id must be 1–64 characters of [A-Za-z0-9._-]"));
        }
        for (name, v) in [
            ("not_before_ms", k.not_before_ms),
            ("not_after_ms", k.not_after_ms),
        ] {
            if v.is_some_and(|t| t < 0) {
                return Err(invalid(format!("{name} must be a Unix time in ms (≥ 0)")));
            }
        }
        if let (Some(nb), Some(na)) = (k.not_before_ms, k.not_after_ms) {
            if nb >= na {
                return Err(invalid("not_before_ms must be before not_after_ms"));
            }
        }
        if k.not_after_ms.is_some_and(|t| t <= now) {
            return Err(invalid("not_after_ms is in the past"));
        }
        let (secret, shown) = match &k.secret {
            Some(s) if s.len() < 16 => {
                return Err(invalid(
                    "a secret given here must be at least 16 characters",
                ))
            }
            Some(s) => (s.clone(), false),
            None => (generate_secret()?, true),
        };
        let pending = rt.config.raw.admin.key_approval;
        let entry = KeyEntry {
            app: app.to_string(),
            id: id.clone(),
            source: "api".into(),
            secret: Some(StoredSecret(secret.clone())),
            not_before_ms: k.not_before_ms,
            not_after_ms: k.not_after_ms,
            by: who.name.clone(),
            created_ms: now,
            pending,
            approved_by: None,
            retired_ms: None,
            retired_by: None,
        };
        self.mutate(rt, who, |s| {
            let before = ids_hash(app, &s.keys);
            let mine = || s.keys.iter().filter(|e| e.app == app);
            if mine().any(|e| e.id == id && !e.live()) {
                return Err(conflict(
                    "KEY_RETIRED",
                    format!(
                        "key {id:?} of app {app:?} was retired; a retired id is never used again"
                    ),
                ));
            }
            if mine().any(|e| e.id == id) || cfg.keys.iter().any(|c| c.id == id) {
                return Err(conflict(
                    "KEY_EXISTS",
                    format!("app {app:?} already has a key {id:?}"),
                ));
            }
            let held = cfg
                .keys
                .iter()
                .filter(|c| !mine().any(|e| e.id == c.id))
                .count()
                + mine().filter(|e| e.live()).count();
            if held >= MAX_KEYS {
                return Err(conflict(
                    "KEY_LIMIT",
                    format!("app {app:?} holds {held} keys, the most it may; retire one first"),
                ));
            }
            s.keys.push(entry.clone());
            s.keys_version += 1;
            Ok((
                Audit {
                    action: "key.add".into(),
                    target: format!("{app}/{id}"),
                    before: Some(before),
                    after: Some(ids_hash(app, &s.keys)),
                    detail: serde_json::json!({
                        "app": app, "id": id, "not_before_ms": k.not_before_ms,
                        "not_after_ms": k.not_after_ms, "pending": pending,
                        "secret": if shown { "generated" } else { "given" },
                    }),
                },
                (),
            ))
        })?;
        let state = if pending {
            "pending"
        } else if k.not_before_ms.is_some_and(|t| t > now) {
            "not_yet_valid"
        } else {
            "active"
        };
        Ok(CreatedKey {
            app: app.to_string(),
            id,
            secret: shown.then_some(secret),
            not_before_ms: k.not_before_ms,
            not_after_ms: k.not_after_ms,
            state,
        })
    }

    /// A second admin approves a pending key (`[admin] key_approval`).
    pub fn approve_key(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        app: &str,
        id: &str,
    ) -> Result<(), ApiError> {
        Self::key_app(rt, app)?;
        self.mutate(rt, who, |s| {
            let before = ids_hash(app, &s.keys);
            let Some(e) = s
                .keys
                .iter_mut()
                .find(|e| e.app == app && e.id == id && e.live())
            else {
                return Err(not_found(app, id));
            };
            if !e.pending {
                return Err(conflict(
                    "NOT_PENDING",
                    format!("key {id:?} of app {app:?} is not waiting for approval"),
                ));
            }
            if e.by == who.name {
                return Err(ApiError::new(
                    403,
                    "FOUR_EYES",
                    format!(
                        "{} added key {id:?}; someone else must approve it",
                        who.name
                    ),
                ));
            }
            e.pending = false;
            e.approved_by = Some(who.name.clone());
            s.keys_version += 1;
            Ok((
                Audit {
                    action: "key.approve".into(),
                    target: format!("{app}/{id}"),
                    before: Some(before),
                    after: Some(ids_hash(app, &s.keys)),
                    detail: serde_json::json!({ "app": app, "id": id }),
                },
                (),
            ))
        })
    }

    /// Retires a key of `app` (configured or added here) at once, on every instance.
    pub fn retire_key(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        app: &str,
        id: &str,
    ) -> Result<RetiredKey, ApiError> {
        let cfg = Self::key_app(rt, app)?;
        let now = now_ms();
        self.mutate(rt, who, |s| {
            let before = ids_hash(app, &s.keys);
            let source = match s.keys.iter_mut().find(|e| e.app == app && e.id == id) {
                Some(e) if !e.live() => {
                    return Err(conflict(
                        "KEY_RETIRED",
                        format!("key {id:?} of app {app:?} is already retired"),
                    ))
                }
                Some(e) => {
                    e.secret = None;
                    e.retired_ms = Some(now);
                    e.retired_by = Some(who.name.clone());
                    e.source.clone()
                }
                None if cfg.keys.iter().any(|c| c.id == id) => {
                    s.keys.push(KeyEntry {
                        app: app.to_string(),
                        id: id.to_string(),
                        source: "config".into(),
                        secret: None,
                        not_before_ms: None,
                        not_after_ms: None,
                        by: who.name.clone(),
                        created_ms: now,
                        pending: false,
                        approved_by: None,
                        retired_ms: Some(now),
                        retired_by: Some(who.name.clone()),
                    });
                    "config".to_string()
                }
                None => return Err(not_found(app, id)),
            };
            prune_retired(&mut s.keys, app);
            s.keys_version += 1;
            Ok((
                Audit {
                    action: "key.retire".into(),
                    target: format!("{app}/{id}"),
                    before: Some(before),
                    after: Some(ids_hash(app, &s.keys)),
                    detail: serde_json::json!({ "app": app, "id": id, "source": source }),
                },
                (),
            ))
        })?;
        let left = keyring(cfg, &self.store.load().map(|s| s.keys).unwrap_or_default());
        let active = left
            .keys()
            .iter()
            .any(|k| k.validity(now) == keys::Validity::Active);
        Ok(RetiredKey {
            app: app.to_string(),
            retired: id.to_string(),
            warning: (!active).then(|| {
                format!("app {app:?} has no key valid now: every request of this app is refused until a key is added")
            }),
        })
    }

    /// Makes the engine's keyrings what `state` says (every configured app).
    pub(super) fn apply_keys(&self, rt: &Host<'_>, state: &ControlState) {
        for app in &rt.config.apps {
            if let Err(e) = rt.engine.set_keyring(&app.id, keyring(app, &state.keys)) {
                tracing::error!(app = %app.id, error = %e, "cannot apply the keyring");
            }
            // After the swap: the keys that stayed carry their counters over.
            if let Some(ring) = rt.engine.keyring(&app.id) {
                rt.metrics.track_keys(&app.id, &ring);
            }
        }
        tracing::info!(version = state.keys_version, "signing keys applied");
    }
}

/// Keeps the newest [`MAX_RETIRED`] retired ids of `app`.
fn prune_retired(entries: &mut Vec<KeyEntry>, app: &str) {
    let mut gone: Vec<i64> = entries
        .iter()
        .filter(|e| e.app == app)
        .filter_map(|e| e.retired_ms)
        .collect();
    if gone.len() <= MAX_RETIRED {
        return;
    }
    gone.sort_unstable();
    let cut = gone[gone.len() - MAX_RETIRED];
    let mut extra = gone.len() - MAX_RETIRED;
    entries.retain(|e| {
        let drop = extra > 0 && e.app == app && e.retired_ms.is_some_and(|t| t < cut);
        if drop {
            extra -= 1;
        }
        !drop
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ValidKey;

    fn app() -> ValidApp {
        ValidApp {
            id: "shop".into(),
            keys: vec![
                ValidKey {
                    id: "default".into(),
                    secret: b"s0".to_vec(),
                    not_before_ms: None,
                    not_after_ms: None,
                },
                ValidKey {
                    id: "k1".into(),
                    secret: b"s1".to_vec(),
                    not_before_ms: None,
                    not_after_ms: None,
                },
            ],
            window_ms: 5000,
            accept_unsigned: false,
        }
    }

    fn entry(id: &str, retired: Option<i64>, pending: bool) -> KeyEntry {
        KeyEntry {
            app: "shop".into(),
            id: id.into(),
            source: "api".into(),
            secret: retired
                .is_none()
                .then(|| StoredSecret(format!("secret-of-{id}"))),
            not_before_ms: None,
            not_after_ms: None,
            by: "root".into(),
            created_ms: 1,
            pending,
            approved_by: None,
            retired_ms: retired,
            retired_by: None,
        }
    }

    #[test]
    fn keyrings_are_the_configured_keys_less_retired_ones_then_the_added_ones() {
        let mut entries = vec![
            entry("k2", None, false),
            entry("k3", None, true),
            entry("k4", Some(5), false),
            entry("k1", Some(6), false),
        ];
        entries[3].source = "config".into();
        let mut other = entry("k9", None, false);
        other.app = "pay".into();
        entries.push(other);
        let r = keyring(&app(), &entries);
        let ids: Vec<&str> = r.keys().iter().map(|k| k.id()).collect();
        assert_eq!(ids, ["default", "k2"]);
        assert_eq!(r.retired().collect::<Vec<_>>(), ["k4", "k1"]);
        // No secret in anything printable.
        let text = format!("{entries:?}");
        assert!(!text.contains("secret-of"), "{text}");
        assert_ne!(ids_hash("shop", &entries), ids_hash("shop", &entries[..2]));
    }

    #[test]
    fn only_the_newest_retired_ids_are_kept() {
        let mut entries: Vec<KeyEntry> = (0..(MAX_RETIRED as i64 + 3))
            .map(|i| entry(&format!("r{i}"), Some(i), false))
            .collect();
        entries.push(entry("live", None, false));
        prune_retired(&mut entries, "shop");
        assert_eq!(entries.len(), MAX_RETIRED + 1);
        assert_eq!(entries[0].id, "r3");
        assert!(entries.iter().any(|e| e.id == "live"));
    }
}
