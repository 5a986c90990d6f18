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
