//! Client-side signing: the three anti-replay headers for a request (used by `rampart sign`, the
//! tests and integrators' reference).

use crate::replay::canonical::{body_sha256_hex, SignedFields, Signer};

/// A request to sign.
#[derive(Debug, Clone, Copy)]
pub struct ToSign<'a> {
    pub app: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub body: &'a [u8],
    pub timestamp_ms: i64,
    pub nonce: &'a str,
}

/// The anti-replay headers of a signed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
    /// Lower-case hex SHA-256 of the body (what `x-content-sha256` carries in forward-auth mode).
    pub body_sha256: String,
}

pub fn sign(secret: &[u8], r: &ToSign<'_>) -> SignedHeaders {
    sign_many(&[secret], r)
}

/// Signs with each secret in turn: `signature` holds one `v1=` entry per secret, comma-separated,
/// in the order given — what a client sends while its app rolls from one key to the next (the
/// engine accepts the request when any entry matches a key it holds). Give at most
/// [`MAX_ENTRIES`](crate::replay::keys::MAX_ENTRIES) secrets: the engine reads no more.
pub fn sign_many(secrets: &[&[u8]], r: &ToSign<'_>) -> SignedHeaders {
    let body_sha256 = body_sha256_hex(r.body);
    let timestamp = r.timestamp_ms.to_string();
    let fields = SignedFields {
        app: r.app,
        method: r.method,
        path: r.path,
        query: r.query,
        timestamp: &timestamp,
        nonce: r.nonce,
        body_sha256: &body_sha256,
    };
    let signature = secrets
        .iter()
        .map(|s| Signer::new(s).sign(&fields))
        .collect::<Vec<_>>()
        .join(",");
    SignedHeaders {
        timestamp,
        nonce: r.nonce.to_string(),
        signature,
        body_sha256,
    }
}
