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
//!
//! An app can hold several keys, each with an id, so that its secret can be replaced without a
//! flag day. [`sign_with_keys`] signs with one key and names it (`x-key-id`), or, while the app
//! rolls from one key to the next, with both: `x-signature` then carries one `v1=` entry per key
//! (comma-separated, at most four) and no key is named, and the engine accepts the request when
//! any entry matches a key it holds.
//!
//! ```
//! use rampart_sign::{sign_with_keys, Key, Request};
//! let r = Request {
//!     app: "demo", method: "POST", path: "/api/order/pay", query: "b=2&a=1",
//!     body: br#"{"order":"A1","amount":100}"#, timestamp_ms: 1_700_000_000_000,
//!     nonce: "n0nce-0123456789AB",
//! };
//! let new = Key { id: "k2", secret: b"demo-secret-2" };
//! let old = Key { id: "default", secret: b"demo-secret" };
//! let one = sign_with_keys(&[new], &r);
//! assert_eq!(one.key_id.as_deref(), Some("k2"));
//! let roll = sign_with_keys(&[new, old], &r);
//! assert_eq!(roll.key_id, None);
//! assert!(roll.signature.ends_with(",v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33"));
//! for (name, value) in roll.pairs() {
//!     // request.header(name, value)
//! #   assert!(!value.is_empty(), "{name}");
//! }
//! ```

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
    /// `x-key-id`, when one named key signed.
    pub key_id: Option<String>,
}

impl Headers {
    /// The headers to send, by name: `x-timestamp`, `x-nonce`, `x-signature`, and `x-key-id` when
    /// a key is named.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![
            ("x-timestamp", self.timestamp.as_str()),
            ("x-nonce", self.nonce.as_str()),
            ("x-signature", self.signature.as_str()),
        ];
        if let Some(k) = &self.key_id {
            out.push(("x-key-id", k.as_str()));
        }
        out
    }
}

/// One of an app's signing keys.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    /// The key's id (1–64 characters of `[A-Za-z0-9._-]`); an app's plain secret is `default`.
    pub id: &'a str,
    pub secret: &'a [u8],
}

/// Most `v1=` entries the engine reads from one `x-signature`.
pub const MAX_SIGNATURES: usize = 4;

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

/// The anti-replay headers of `r`, signed with `secret` (no key named: the engine tries every
/// key of the app).
pub fn sign(secret: &[u8], r: &Request<'_>) -> Headers {
    signed(&[secret], None, r)
}

/// The anti-replay headers of `r` signed with `keys`: one key is named in `key_id` (`x-key-id`);
/// two to four (a client rolling from one key to the next, the new one first) give one `v1=`
/// entry each, in order, and name none.
///
/// # Panics
///
/// When `keys` is empty or holds more than [`MAX_SIGNATURES`] keys.
pub fn sign_with_keys(keys: &[Key<'_>], r: &Request<'_>) -> Headers {
    assert!(
        (1..=MAX_SIGNATURES).contains(&keys.len()),
        "sign with 1 to {MAX_SIGNATURES} keys"
    );
    let secrets: Vec<&[u8]> = keys.iter().map(|k| k.secret).collect();
    let named = (keys.len() == 1).then(|| keys[0].id.to_string());
    signed(&secrets, named, r)
}

fn signed(secrets: &[&[u8]], key_id: Option<String>, r: &Request<'_>) -> Headers {
    let text = canonical(r);
    let signature = secrets
        .iter()
        .map(|secret| {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
            mac.update(text.as_bytes());
            format!("v1={}", hex::encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(",");
    Headers {
        timestamp: r.timestamp_ms.to_string(),
        nonce: r.nonce.to_string(),
        signature,
        content_sha256: hex::encode(Sha256::digest(r.body)),
        key_id,
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

/// Proof-of-work challenges (contract v1.1): a `challenge` answer carries
/// `{"kind":"pow","algorithm":"sha256","difficulty":D,"token":…}`; the client finds a decimal
/// counter `c` such that SHA-256 of `token + ":" + c` starts with at least `D` zero bits and sends
/// the request again (new nonce, signed as usual) with `x-rampart-solution: <token>:<c>`. Shared
/// vectors: `sdk/vectors.json` (`pow`).
pub mod pow {
    use sha2::{Digest, Sha256};

    /// Leading zero bits of SHA-256(`token:counter`).
    pub fn zero_bits(token: &str, counter: u64) -> u32 {
        let d = Sha256::new()
            .chain_update(token.as_bytes())
            .chain_update(b":")
            .chain_update(counter.to_string().as_bytes())
            .finalize();
        let mut bits = 0;
        for b in d {
            bits += b.leading_zeros();
            if b != 0 {
                break;
            }
        }
        bits
    }

    /// The smallest solving counter. `progress` is called every 65,536 tries with the number of
    /// tries so far (about `2^difficulty` are needed on average); return `false` to give up.
    pub fn solve(
        token: &str,
        difficulty: u8,
        mut progress: impl FnMut(u64) -> bool,
    ) -> Option<u64> {
        let mut c = 0u64;
        loop {
            if zero_bits(token, c) >= difficulty as u32 {
                return Some(c);
            }
            c += 1;
            if c.is_multiple_of(65_536) && !progress(c) {
                return None;
            }
        }
    }

    /// The `x-rampart-solution` header value for `token` solved at `difficulty`.
    pub fn solution(token: &str, difficulty: u8) -> String {
        let c = solve(token, difficulty, |_| true).expect("never given up");
        format!("{token}:{c}")
    }
}
