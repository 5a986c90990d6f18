//! Canonical string and signature v1 over attacker-controlled fields: never panics; signing then
//! verifying round-trips; the query canonicalisation is idempotent and order-insensitive.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::replay::canonical::{body_sha256_hex, canonical_query, SignedFields, Signer};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{1}');
    let mut next = || parts.next().unwrap_or("");
    let (app, method, path, query, ts, nonce, sig) =
        (next(), next(), next(), next(), next(), next(), next());
    let q = canonical_query(query);
    assert_eq!(canonical_query(&q), q, "canonical query is idempotent");
    let mut reversed: Vec<&str> = query.split('&').collect();
    reversed.reverse();
    assert_eq!(canonical_query(&reversed.join("&")), q, "order does not matter");
    let body = body_sha256_hex(data);
    let fields = SignedFields {
        app,
        method,
        path,
        query,
        timestamp: ts,
        nonce,
        body_sha256: &body,
    };
    let signer = Signer::new(app.as_bytes());
    let good = signer.sign(&fields);
    assert!(signer.verify(&fields, &good).is_ok());
    let _ = signer.verify(&fields, sig);
});
