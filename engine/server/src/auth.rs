//! Who may use the admin API: users with argon2 password hashes, console sessions in signed
//! cookies with a CSRF token, API tokens for pipelines, and login throttling.
//!
//! Credentials, in the order they are looked at:
//! - `Authorization: Bearer <token>`: an API token from `[[admin.tokens]]` (compared by SHA-256 in
//!   constant time). No CSRF token is needed: a browser never sends it on its own.
//! - `Authorization: Basic <user:password>`: for scripts and curl. Throttled like a login.
//! - The `rampart_session` cookie set by `POST /admin/v1/login`. Requests that change something
//!   must also carry the session's CSRF token in `x-csrf-token`.
//!
//! A session cookie is `<id>.<user>.<expiry_ms>.<mac>`, the MAC an HMAC-SHA256 under a key kept in
//! the control store (shared by every instance). Logging out revokes the id until it expires.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Admin roles, each including the ones before it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads decisions, statistics, rule sets, rollouts, lists and the audit log.
    #[default]
    Viewer,
    /// Uploads rule sets, runs regressions, stages shadow and canary rollouts,
    /// rolls back, edits lists.
    Author,
    /// Approves a candidate for stable (never their own).
    Approver,
    /// Everything, and the runtime settings (log level).
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Author => "author",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

/// How a caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Session,
    Token,
    Basic,
    /// The engine itself (imports, automatic rollbacks).
    System,
}

/// An authenticated caller.
#[derive(Debug, Clone, Serialize)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    pub via: Via,
    /// The session id, for logout.
    #[serde(skip)]
    pub session: Option<String>,
}

impl Principal {
    pub fn system(name: &str) -> Principal {
        Principal {
            name: name.into(),
            role: Role::Admin,
            via: Via::System,
            session: None,
        }
    }
}

/// Why a caller was not let in.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthError {
    /// No credentials, or wrong ones: 401 `UNAUTHENTICATED`.
    Unauthenticated(String),
    /// Too many failed attempts: 429 `LOGIN_THROTTLED`.
    Throttled { retry_after_ms: i64 },
    /// A session call that changes state without the CSRF token: 403 `CSRF_FAILED`.
    Csrf,
}

/// A configured user.
#[derive(Clone)]
pub struct User {
    pub name: String,
    pub role: Role,
    pub password_hash: String,
}

/// A configured API token (its SHA-256).
#[derive(Clone)]
pub struct Token {
    pub name: String,
    pub role: Role,
    pub sha256: [u8; 32],
}

/// Login throttling: after `max_failures` failures for one user name (or one client address)
/// within `lockout_ms`, further attempts are refused until the window passes.
pub struct Throttle {
    max_failures: u32,
    lockout_ms: i64,
    failures: Mutex<HashMap<String, (u32, i64)>>,
}

impl Throttle {
    pub fn new(max_failures: u32, lockout_ms: i64) -> Self {
        Throttle {
            max_failures,
            lockout_ms,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(retry_after_ms)` when `key` is locked out.
    pub fn check(&self, key: &str, now_ms: i64) -> Result<(), i64> {
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match f.get(key) {
            Some(&(n, first)) if n >= self.max_failures && now_ms - first < self.lockout_ms => {
                Err(self.lockout_ms - (now_ms - first))
            }
            _ => Ok(()),
        }
    }

    pub fn failed(&self, key: &str, now_ms: i64) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() > 100_000 {
            f.retain(|_, (_, first)| now_ms - *first < self.lockout_ms);
        }
        let e = f.entry(key.to_string()).or_insert((0, now_ms));
        if now_ms - e.1 >= self.lockout_ms {
            *e = (0, now_ms);
        }
        e.0 += 1;
    }

    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Verifies `password` against a PHC-format argon2 hash.
pub fn verify_password(hash: &str, password: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    match PasswordHash::new(hash) {
        Ok(h) => argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok(),
        Err(_) => false,
    }
}

/// Hashes `password` (argon2id, default parameters, random salt) into PHC format.
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let mut salt = [0u8; 16];
    getrandom::getrandom(&mut salt).map_err(|e| e.to_string())?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Checks that `hash` is a PHC string argon2 can verify with.
pub fn check_hash(hash: &str) -> Result<(), String> {
    let h = argon2::password_hash::PasswordHash::new(hash).map_err(|e| e.to_string())?;
    if !h.algorithm.as_str().starts_with("argon2") {
        return Err(format!("{} is not an argon2 hash", h.algorithm));
    }
    Ok(())
}

/// Constant-time equality of two byte strings (the length is not secret): `subtle`, the
/// RustCrypto crate `hmac`'s own `verify_slice` uses, which keeps the optimiser from turning the
/// comparison into an early exit. Measured by `cargo bench -p rampart --bench constant_time`.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// The session signer.
pub struct Sessions {
    key: Vec<u8>,
    pub ttl_ms: i64,
}

impl Sessions {
    /// The shared key (other keys are derived from it: the challenges' when none is configured).
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }
}

/// A decoded session cookie.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: String,
    pub user: String,
    pub expires_ms: i64,
}

impl Sessions {
    pub fn new(key: Vec<u8>, ttl_ms: i64) -> Self {
        Sessions { key, ttl_ms }
    }

    fn mac(&self, parts: &[&str]) -> String {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        for p in parts {
            m.update(p.as_bytes());
            m.update(b"\n");
        }
        hex::encode(m.finalize().into_bytes())
    }

    /// A new session cookie value for `user`.
    pub fn issue(&self, user: &str, now_ms: i64) -> (String, Session) {
        let mut id = [0u8; 16];
        let _ = getrandom::getrandom(&mut id);
        let s = Session {
            id: hex::encode(id),
            user: user.to_string(),
            expires_ms: now_ms + self.ttl_ms,
        };
        let exp = s.expires_ms.to_string();
        let mac = self.mac(&["session", &s.id, &s.user, &exp]);
        // User names are checked at config time to be cookie-safe (no `.` or `;`).
        (format!("{}.{}.{}.{}", s.id, s.user, exp, mac), s)
    }

    /// Decodes and checks a cookie value (signature and expiry; not revocation).
    pub fn open(&self, cookie: &str, now_ms: i64) -> Option<Session> {
        let mut it = cookie.split('.');
        let (id, user, exp, mac) = (it.next()?, it.next()?, it.next()?, it.next()?);
        if it.next().is_some() {
            return None;
        }
        let want = self.mac(&["session", id, user, exp]);
        if !ct_eq(want.as_bytes(), mac.as_bytes()) {
            return None;
        }
        let expires_ms: i64 = exp.parse().ok()?;
        (expires_ms > now_ms).then(|| Session {
            id: id.to_string(),
            user: user.to_string(),
            expires_ms,
        })
    }

    /// The CSRF token bound to a session.
    pub fn csrf(&self, session_id: &str) -> String {
        self.mac(&["csrf", session_id])
    }
}

/// The configured identities.
pub struct Identities {
    pub users: HashMap<String, User>,
    pub tokens: Vec<Token>,
}

impl Identities {
    pub fn token(&self, presented: &str) -> Option<&Token> {
        let h: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Every token is compared, so the time does not say which one matched.
        let mut found = None;
        for t in &self.tokens {
            if ct_eq(&t.sha256, &h) {
                found = Some(t);
            }
        }
        found
    }
}

/// Checks a user name for the cookie format and the audit log.
pub fn valid_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_@+".contains(&b))
}

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "rampart_session";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Viewer < Role::Author);
        assert!(Role::Author < Role::Approver);
        assert!(Role::Approver < Role::Admin);
    }

    #[test]
    fn sessions_round_trip_and_resist_tampering() {
        let s = Sessions::new(b"k".to_vec(), 1000);
        let (cookie, sess) = s.issue("alice", 5);
        assert_eq!(s.open(&cookie, 10), Some(sess.clone()));
        assert_eq!(s.open(&cookie, 1005), None, "expired");
        let forged = cookie.replacen("alice", "admin", 1);
        assert_eq!(s.open(&forged, 10), None);
        assert_eq!(
            Sessions::new(b"other".to_vec(), 1000).open(&cookie, 10),
            None
        );
        assert_ne!(s.csrf(&sess.id), s.csrf("another"));
    }

    #[test]
    fn ct_eq_compares_whole_strings_of_any_content() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"token-1", b"token-1"));
        assert!(!ct_eq(b"token-1", b"token-2"));
        assert!(!ct_eq(b"token-1", b"token-10"), "a prefix is not equal");
        assert!(!ct_eq(b"\x00", b""));
        // Every single-bit difference anywhere is seen.
        let a = [0x5au8; 32];
        for i in 0..32 {
            for bit in 0..8 {
                let mut b = a;
                b[i] ^= 1 << bit;
                assert!(!ct_eq(&a, &b));
            }
        }
    }

    #[test]
    fn passwords_hash_and_verify() {
        let h = hash_password("correct horse").unwrap();
        assert!(check_hash(&h).is_ok());
        assert!(verify_password(&h, "correct horse"));
        assert!(!verify_password(&h, "wrong"));
        assert!(!verify_password("not a hash", "x"));
    }

    #[test]
    fn throttle_locks_out_after_failures_then_forgets() {
        let t = Throttle::new(3, 1000);
        for _ in 0..3 {
            assert!(t.check("u", 0).is_ok());
            t.failed("u", 0);
        }
        assert_eq!(t.check("u", 10), Err(990));
        assert!(t.check("u", 1000).is_ok());
        t.succeeded("u");
        assert!(t.check("u", 10).is_ok());
    }
}
