//! The shared vectors, byte for byte.

use rampart_sign::{canonical, nonce, sign, Request};

#[test]
fn every_shared_vector_signs_byte_for_byte() {
    let text = std::fs::read_to_string(format!(
        "{}/../vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vectors = v["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 8);
    for t in vectors {
        let s = |k: &str| t[k].as_str().unwrap();
        let r = Request {
            app: s("app"),
            method: s("method"),
            path: s("path"),
            query: s("query"),
            body: s("body").as_bytes(),
            timestamp_ms: t["timestamp_ms"].as_i64().unwrap(),
            nonce: s("nonce"),
        };
        assert_eq!(canonical(&r), s("canonical"), "{}", s("name"));
        let h = sign(s("secret").as_bytes(), &r);
        assert_eq!(h.signature, s("signature"), "{}", s("name"));
        assert_eq!(h.content_sha256, s("body_sha256"), "{}", s("name"));
    }
}

#[test]
fn nonces_are_valid_and_distinct() {
    let a = nonce();
    let b = nonce();
    assert_ne!(a, b);
    assert_eq!(a.len(), 24);
    assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
}
