//! Client-side signing for Rampart's anti-replay headers, signature v1 — a small crate with no
//! engine dependency, for services and SDKs that call protected endpoints.
//!
//! ```
//! let h = rampart_sign::sign(
//!     b"demo-secret",
//!     &rampart_sign::Request {
//!         app: "demo",
//!         method: "POST",
//!         path: "/api/order/pay",
//!         query: "b=2&a=1",
//!         body: br#"{"order":"A1","amount":100}"#,
//!         timestamp_ms: 1_700_000_000_000,
//!         nonce: "n0nce-0123456789AB",
//!     },
//! );
//! assert_eq!(
//!     h.signature,
//!     "v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33"
//! );
//! ```
//!
//! The canonical string is the fields below joined by `\n`: `v1`, the app, the method
//! upper-cased, the path as sent, the raw query split on `&` with empty parts dropped and the parts
//! sorted in byte order (no decoding or re-encoding), the timestamp (Unix ms), the nonce, and the
//! lower-case hex SHA-256 of the body (the empty body included). The signature is
//! `v1=<lower-case hex HMAC-SHA256(secret, canonical)>`. Shared vectors: `sdk/vectors.json`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The request to sign.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub app: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// Raw query string without `?`.
    pub query: &'a str,
    pub body: &'a [u8],
    pub timestamp_ms: i64,
    /// 16–64 characters of `[A-Za-z0-9_-]`, unique per app ([`nonce`] makes one).
    pub nonce: &'a str,
}

/// The headers to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    /// `x-timestamp`
    pub timestamp: String,
    /// `x-nonce`
    pub nonce: String,
    /// `x-signature`
    pub signature: String,
    /// `x-content-sha256` (forward-auth mode, where the proxy does not forward the body).
    pub content_sha256: String,
}

/// The raw query with empty parts dropped and the parts in byte order.
pub fn canonical_query(query: &str) -> String {
    let mut parts: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    parts.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    parts.join("&")
}

/// The v1 canonical string of `r`.
pub fn canonical(r: &Request<'_>) -> String {
    [
        "v1",
        r.app,
        &r.method.to_ascii_uppercase(),
        r.path,
        &canonical_query(r.query),
        &r.timestamp_ms.to_string(),
        r.nonce,
        &hex::encode(Sha256::digest(r.body)),
    ]
    .join("\n")
}

/// The anti-replay headers of `r`.
pub fn sign(secret: &[u8], r: &Request<'_>) -> Headers {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(canonical(r).as_bytes());
    Headers {
        timestamp: r.timestamp_ms.to_string(),
        nonce: r.nonce.to_string(),
        signature: format!("v1={}", hex::encode(mac.finalize().into_bytes())),
        content_sha256: hex::encode(Sha256::digest(r.body)),
    }
}

/// A fresh random nonce: 24 characters of `[A-Za-z0-9]` (~143 bits).
pub fn nonce() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut raw = [0u8; 24];
    getrandom::getrandom(&mut raw).expect("the operating system's random source");
    // 62 × 4 = 248: rejection-free would bias; take the byte modulo 62 only below 248.
    let mut out = String::with_capacity(24);
    let mut i = 0;
    while out.len() < 24 {
        if i == raw.len() {
            getrandom::getrandom(&mut raw).expect("the operating system's random source");
            i = 0;
        }
        let b = raw[i];
        i += 1;
        if b < 248 {
            out.push(ALPHABET[(b % 62) as usize] as char);
        }
    }
    out
}

/// Now, in Unix milliseconds (what `x-timestamp` carries).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
