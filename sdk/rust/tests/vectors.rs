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

/// The rotation vectors: one named key, or several keys' entries in order with none named.
#[test]
fn every_rotation_vector_signs_byte_for_byte() {
    use rampart_sign::{sign_with_keys, Key};
    let text = std::fs::read_to_string(format!(
        "{}/../vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys = v["rotation"]["keys"].as_array().unwrap();
    let key = |id: &str| {
        let k = keys.iter().find(|k| k["id"] == id).unwrap();
        Key {
            id: k["id"].as_str().unwrap(),
            secret: k["secret"].as_str().unwrap().as_bytes(),
        }
    };
    let vectors = v["rotation"]["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 4);
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
        let with: Vec<Key> = t["sign_with"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| key(id.as_str().unwrap()))
            .collect();
        let h = sign_with_keys(&with, &r);
        assert_eq!(h.signature, s("x-signature"), "{}", s("name"));
        assert_eq!(h.key_id.as_deref(), t["x-key-id"].as_str(), "{}", s("name"));
        let names: Vec<&str> = h.pairs().iter().map(|(n, _)| *n).collect();
        assert_eq!(names.contains(&"x-key-id"), with.len() == 1);
    }
}

#[test]
#[should_panic(expected = "sign with 1 to 4 keys")]
fn five_keys_are_refused() {
    use rampart_sign::{sign_with_keys, Key};
    let k = Key {
        id: "k",
        secret: b"s",
    };
    let r = Request {
        app: "a",
        method: "GET",
        path: "/",
        query: "",
        body: b"",
        timestamp_ms: 1,
        nonce: "abcdefghijklmnop",
    };
    sign_with_keys(&[k; 5], &r);
}

#[test]
fn every_proof_of_work_vector_solves_to_its_counter() {
    let text = std::fs::read_to_string(format!(
        "{}/../vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for t in v["pow"]["vectors"].as_array().unwrap() {
        let token = t["token"].as_str().unwrap();
        let c = t["counter"].as_u64().unwrap();
        let mut calls = 0;
        let found =
            rampart_sign::pow::solve(token, t["difficulty"].as_u64().unwrap() as u8, |_| {
                calls += 1;
                true
            });
        assert_eq!(found, Some(c), "{token}");
        assert_eq!(calls as u64, c / 65_536, "progress every 65,536 tries");
        assert_eq!(
            rampart_sign::pow::zero_bits(token, c) as u64,
            t["zero_bits"].as_u64().unwrap()
        );
    }
}
