//! Canonical string and signature v1 over attacker-controlled fields: never panics; signing then
//! verifying round-trips; the query canonicalisation is idempotent and order-insensitive; an
//! app's keyring passes an arbitrary `x-signature` (and `x-key-id`) only when it carries the
//! MAC of one of its keys.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::replay::canonical::{body_sha256_hex, canonical_query, SignedFields, Signer};
use rampart_core::replay::keys::{Keyring, SigningKey};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{1}');
    let mut next = || parts.next().unwrap_or("");
    let (app, method, path, query, ts, nonce, sig, key_id) = (
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
    );
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
    let ring = Keyring::new(
        vec![
            SigningKey::new("k1", app.as_bytes(), None, None),
            SigningKey::new("k2", b"two", Some(0), None),
        ],
        ["k0".to_string()],
    )
    .unwrap();
    let named = (!key_id.is_empty()).then_some(key_id);
    if let Ok(k) = ring.verify(&fields, sig, named, 1) {
        let mac = match k.id() {
            "k1" => good.clone(),
            _ => Signer::new(b"two").sign(&fields),
        };
        assert!(sig.to_ascii_lowercase().contains(&mac[3..]));
    }
});
