//! Signature v1: the canonical string and its HMAC-SHA256.
//!
//! The canonical string is the contract callers sign (DESIGN §3). It is versioned (`v1` is its first
//! line) so a later version can add fields without ambiguity: a verifier knows from the signature
//! header's `v1=` prefix which layout the client used.
//!
//! ```text
//! v1\n<app>\n<METHOD>\n<path>\n<sorted query>\n<x-timestamp>\n<x-nonce>\n<hex sha256(body)>
//! ```
//!
//! Header values are used exactly as sent (no trimming, no parsing): the signature step runs before
//! the window and nonce steps, and a value that does not parse is reported by the step that owns it.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Lower-case hex SHA-256 of the empty body, used when a request carries no body.
pub const EMPTY_BODY_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Signature scheme prefix accepted in `x-signature`.
pub const SIGNATURE_PREFIX: &str = "v1=";

/// The query string as it enters the canonical string: split on `&`, empty parts dropped, parts
/// sorted in byte order, joined by `&`. No decoding or re-encoding (a leading `?` is not stripped:
/// callers send the raw query without it).
pub fn canonical_query(query: &str) -> String {
    let mut parts: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    if parts.len() > 1 {
        parts.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    }
    parts.join("&")
}

/// An `x-timestamp` value as the window step reads it: 1–16 ASCII digits, Unix milliseconds.
pub fn parse_timestamp(raw: &str) -> Option<i64> {
    if raw.is_empty() || raw.len() > 16 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// Whether `s` is a SHA-256 in hex: 64 hex digits, either case.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Lower-case hex SHA-256 of `body`.
pub fn body_sha256_hex(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// The fields signed by v1, borrowed from the request being judged.
#[derive(Debug, Clone, Copy)]
pub struct SignedFields<'a> {
    pub app: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub timestamp: &'a str,
    pub nonce: &'a str,
    /// Lower-case hex SHA-256 of the body.
    pub body_sha256: &'a str,
}

impl SignedFields<'_> {
    /// Builds the v1 canonical string.
    pub fn canonical_string(&self) -> String {
        let mut s = String::with_capacity(
            16 + self.app.len()
                + self.method.len()
                + self.path.len()
                + self.query.len()
                + self.timestamp.len()
                + self.nonce.len()
                + 64,
        );
        self.write_canonical(&mut s);
        s
    }

    fn write_canonical(&self, s: &mut String) {
        s.push_str("v1\n");
        s.push_str(self.app);
        s.push('\n');
        for c in self.method.chars() {
            s.push(c.to_ascii_uppercase());
        }
        s.push('\n');
        s.push_str(self.path);
        s.push('\n');
        s.push_str(&canonical_query(self.query));
        s.push('\n');
        s.push_str(self.timestamp);
        s.push('\n');
        s.push_str(self.nonce);
        s.push('\n');
        for c in self.body_sha256.chars() {
            s.push(c.to_ascii_lowercase());
        }
    }
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("x-signature must look like v1=<64 lower-case hex characters>")]
    Malformed,
    #[error("signature does not match the canonical string")]
    Mismatch,
}

/// A per-app signer: the HMAC key schedule is computed once and cloned per request.
#[derive(Clone)]
pub struct Signer {
    mac: HmacSha256,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<secret redacted>)")
    }
}

impl Signer {
    pub fn new(secret: &[u8]) -> Self {
        // HMAC accepts keys of any length, so this cannot fail.
        let mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
        Signer { mac }
    }

    /// The raw 32-byte MAC of the canonical string.
    pub fn mac(&self, fields: &SignedFields<'_>) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(fields.canonical_string().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The MAC of a canonical string already built, for constant-time comparison.
    #[inline]
    pub(crate) fn mac_of(&self, canonical: &[u8]) -> hmac::digest::CtOutput<HmacSha256> {
        let mut mac = self.mac.clone();
        mac.update(canonical);
        mac.finalize()
    }

    /// The `x-signature` header value: `v1=<hex>`.
    pub fn sign(&self, fields: &SignedFields<'_>) -> String {
        format!("{SIGNATURE_PREFIX}{}", hex::encode(self.mac(fields)))
    }

    /// Verifies a single-entry `x-signature` header value in constant time (the comparison of the MAC is done by
    /// `hmac::Mac::verify_slice`, which uses `subtle`).
    pub fn verify(&self, fields: &SignedFields<'_>, header: &str) -> Result<(), SignatureError> {
        let hex_part = header
            .strip_prefix(SIGNATURE_PREFIX)
            .ok_or(SignatureError::Malformed)?;
        if hex_part.len() != 64 {
            return Err(SignatureError::Malformed);
        }
        let mut given = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut given).map_err(|_| SignatureError::Malformed)?;
        let mut mac = self.mac.clone();
        mac.update(fields.canonical_string().as_bytes());
        mac.verify_slice(&given)
            .map_err(|_| SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constant the engine uses for an empty or absent body is the hash it stands for.
    #[test]
    fn the_empty_body_constant_is_the_hash_of_nothing() {
        assert_eq!(EMPTY_BODY_SHA256, body_sha256_hex(b""));
    }

    fn vector() -> (String, SignedFields<'static>) {
        let body = br#"{"order":"A1","amount":100}"#;
        let hash: &'static str = Box::leak(body_sha256_hex(body).into_boxed_str());
        (
            hash.to_string(),
            SignedFields {
                app: "demo",
                method: "POST",
                path: "/api/order/pay",
                query: "b=2&a=1",
                timestamp: "1700000000000",
                nonce: "n0nce-0123456789AB",
                body_sha256: hash,
            },
        )
    }

    #[test]
    fn design_test_vector() {
        let (hash, f) = vector();
        assert_eq!(
            hash,
            "097f49b3c663b859611b281dbde5c2266c8db9f59b63894d30b4bd9b33d0a3a0"
        );
        assert_eq!(
            f.canonical_string(),
            "v1\ndemo\nPOST\n/api/order/pay\na=1&b=2\n1700000000000\nn0nce-0123456789AB\n097f49b3c663b859611b281dbde5c2266c8db9f59b63894d30b4bd9b33d0a3a0"
        );
        let s = Signer::new(b"demo-secret");
        assert_eq!(
            s.sign(&f),
            "v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33"
        );
        assert_eq!(s.verify(&f, &s.sign(&f)), Ok(()));
    }

    #[test]
    fn tampering_any_field_breaks_the_signature() {
        let (_, f) = vector();
        let s = Signer::new(b"demo-secret");
        let sig = s.sign(&f);
        let variants = [
            SignedFields { app: "demo2", ..f },
            SignedFields { method: "GET", ..f },
            SignedFields {
                path: "/api/order/pay2",
                ..f
            },
            SignedFields {
                query: "a=1&b=3",
                ..f
            },
            SignedFields {
                timestamp: "1700000000001",
                ..f
            },
            SignedFields {
                nonce: "n0nce-0123456789AC",
                ..f
            },
            SignedFields {
                body_sha256: EMPTY_BODY_SHA256,
                ..f
            },
        ];
        for v in variants {
            assert_eq!(s.verify(&v, &sig), Err(SignatureError::Mismatch), "{v:?}");
        }
        assert_eq!(
            Signer::new(b"other").verify(&f, &sig),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn malformed_headers() {
        let (_, f) = vector();
        let s = Signer::new(b"demo-secret");
        for h in ["", "v1=", "v2=09ba", "v1=zz", &"v1=".repeat(30), "09ba5cee"] {
            assert_eq!(s.verify(&f, h), Err(SignatureError::Malformed), "{h}");
        }
        let upper = s.sign(&f).to_uppercase().replacen("V1=", "v1=", 1);
        // Upper-case hex decodes to the same bytes; accepted (hex is case-insensitive).
        assert_eq!(s.verify(&f, &upper), Ok(()));
    }

    #[test]
    fn query_canonicalisation() {
        assert_eq!(canonical_query(""), "");
        assert_eq!(canonical_query("&&"), "");
        assert_eq!(canonical_query("b=2&a=1"), "a=1&b=2");
        assert_eq!(canonical_query("a=%20&a=+&&B=1"), "B=1&a=%20&a=+");
        assert_eq!(canonical_query("x"), "x");
    }
}
