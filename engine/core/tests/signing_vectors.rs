//! The engine signs and verifies the shared client vectors (`sdk/vectors.json`) byte for byte, so
//! the client helpers and the engine cannot drift apart.

use rampart_core::replay::canonical::{SignedFields, Signer};
use rampart_core::replay::sign::{sign, ToSign};

#[test]
fn the_engine_agrees_with_every_shared_signing_vector() {
    let text = std::fs::read_to_string(format!(
        "{}/../../sdk/vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for t in v["vectors"].as_array().unwrap() {
        let s = |k: &str| t[k].as_str().unwrap();
        let ts = t["timestamp_ms"].as_i64().unwrap();
        let h = sign(
            s("secret").as_bytes(),
            &ToSign {
                app: s("app"),
                method: s("method"),
                path: s("path"),
                query: s("query"),
                body: s("body").as_bytes(),
                timestamp_ms: ts,
                nonce: s("nonce"),
            },
        );
        assert_eq!(h.signature, s("signature"), "{}", s("name"));
        let timestamp = ts.to_string();
        let fields = SignedFields {
            app: s("app"),
            method: s("method"),
            path: s("path"),
            query: s("query"),
            timestamp: &timestamp,
            nonce: s("nonce"),
            body_sha256: s("body_sha256"),
        };
        assert!(
            Signer::new(s("secret").as_bytes())
                .verify(&fields, s("signature"))
                .is_ok(),
            "{}",
            s("name")
        );
    }
}

/// The rotation vectors: an engine holding the vectors' keys accepts each one and names the key
/// the vector says, and `sign_many` reproduces its `x-signature`.
#[test]
fn the_engine_agrees_with_every_rotation_vector() {
    use rampart_core::replay::canonical::body_sha256_hex;
    use rampart_core::replay::keys::{Keyring, SigningKey};
    use rampart_core::replay::sign::sign_many;
    let text = std::fs::read_to_string(format!(
        "{}/../../sdk/vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys = v["rotation"]["keys"].as_array().unwrap();
    let secret = |id: &str| {
        keys.iter().find(|k| k["id"] == id).unwrap()["secret"]
            .as_str()
            .unwrap()
            .as_bytes()
    };
    let ring = Keyring::new(
        keys.iter()
            .map(|k| {
                let id = k["id"].as_str().unwrap();
                SigningKey::new(id, secret(id), None, None)
            })
            .collect(),
        [],
    )
    .unwrap();
    for t in v["rotation"]["vectors"].as_array().unwrap() {
        let s = |k: &str| t[k].as_str().unwrap();
        let ts = t["timestamp_ms"].as_i64().unwrap();
        let with: Vec<&[u8]> = t["sign_with"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| secret(id.as_str().unwrap()))
            .collect();
        let h = sign_many(
            &with,
            &ToSign {
                app: s("app"),
                method: s("method"),
                path: s("path"),
                query: s("query"),
                body: s("body").as_bytes(),
                timestamp_ms: ts,
                nonce: s("nonce"),
            },
        );
        assert_eq!(h.signature, s("x-signature"), "{}", s("name"));
        let timestamp = ts.to_string();
        let hash = body_sha256_hex(s("body").as_bytes());
        let fields = SignedFields {
            app: s("app"),
            method: s("method"),
            path: s("path"),
            query: s("query"),
            timestamp: &timestamp,
            nonce: s("nonce"),
            body_sha256: &hash,
        };
        let key = ring
            .verify(&fields, s("x-signature"), t["x-key-id"].as_str(), 0)
            .unwrap_or_else(|e| panic!("{}: {e}", s("name")));
        assert_eq!(key.id(), s("matches"), "{}", s("name"));
    }
}

/// The proof-of-work vectors: the engine's solver finds the same smallest counters, and its bit
/// count agrees with the recorded digests.
#[test]
fn the_engine_agrees_with_every_proof_of_work_vector() {
    let text = std::fs::read_to_string(format!(
        "{}/../../sdk/vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pow = v["pow"]["vectors"].as_array().unwrap();
    assert!(pow.len() >= 3);
    for t in pow {
        let token = t["token"].as_str().unwrap();
        let d = t["difficulty"].as_u64().unwrap() as u8;
        let c = t["counter"].as_u64().unwrap();
        assert_eq!(rampart_core::challenge::solve(token, d), c, "{token}");
        assert_eq!(
            rampart_core::challenge::zero_bits(token, &c.to_string()) as u64,
            t["zero_bits"].as_u64().unwrap()
        );
    }
}
