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
    let body_sha256 = body_sha256_hex(r.body);
    let timestamp = r.timestamp_ms.to_string();
    let signature = Signer::new(secret).sign(&SignedFields {
        app: r.app,
        method: r.method,
        path: r.path,
        query: r.query,
        timestamp: &timestamp,
        nonce: r.nonce,
        body_sha256: &body_sha256,
    });
    SignedHeaders {
        timestamp,
        nonce: r.nonce.to_string(),
        signature,
        body_sha256,
    }
}
