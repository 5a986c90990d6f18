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

/// Signs a decide request in place, as its client would: sets `x-timestamp`, `x-nonce` and
/// `x-signature` (dropping any other spelling of them) over the request as it stands — the path
/// as sent, the body, else the declared `body_sha256`, else the empty body. Used by the fuzz
/// harness, so that arbitrary requests get past the signature into every later step.
pub fn sign_request(
    secret: &[u8],
    app: &str,
    r: &mut crate::model::JudgedRequest,
    timestamp_ms: i64,
    nonce: &str,
) {
    let body_sha256 = match (&r.body, &r.body_sha256) {
        (Some(b), _) => body_sha256_hex(b.as_bytes()),
        (None, Some(h)) => h.to_ascii_lowercase(),
        (None, None) => body_sha256_hex(b""),
    };
    let timestamp = timestamp_ms.to_string();
    let signature = Signer::new(secret).sign(&SignedFields {
        app,
        method: &r.method,
        path: r.signed_path(),
        query: &r.query,
        timestamp: &timestamp,
        nonce,
        body_sha256: &body_sha256,
    });
    r.headers.retain(|k, _| {
        !["x-timestamp", "x-nonce", "x-signature"]
            .iter()
            .any(|n| k.eq_ignore_ascii_case(n))
    });
    r.headers.insert("x-timestamp".into(), timestamp);
    r.headers.insert("x-nonce".into(), nonce.to_string());
    r.headers.insert("x-signature".into(), signature);
}

/// Signs an arbitrary decide request for the fuzz harness ([`sign_request`] with the app's
/// `secret`): the request's own `x-timestamp` when it is a number (out-of-window ones included),
/// else `now_ms`; its own `x-nonce` when it has one (malformed ones included), else one derived
/// from the request, so the same input replayed is a replay.
pub fn sign_for_fuzzing(req: &mut crate::model::DecideRequest, secret: &[u8], now_ms: i64) {
    use std::hash::{Hash, Hasher};
    let r = &mut req.request;
    let ts = r
        .header("x-timestamp")
        .and_then(|t| t.trim().parse::<i64>().ok())
        .unwrap_or(now_ms);
    let nonce = match r.header("x-nonce") {
        Some(n) => n.to_string(),
        None => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&r.method, &r.path, &r.query, &r.body, &req.user_id).hash(&mut h);
            format!("fuzz-nonce-{:016x}", h.finish())
        }
    };
    sign_request(secret, &req.app.clone(), r, ts, &nonce);
}
