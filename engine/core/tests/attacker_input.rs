//! Properties of everything an attacker controls, as property tests (the same checks as the
//! `fuzz/` targets, so they run in every test run; `cargo fuzz` explores further), plus the fuzz
//! seeds and any crash inputs kept under `fuzz/seeds/` as regressions.

use proptest::prelude::*;
use rampart_core::replay::canonical::{body_sha256_hex, canonical_query, SignedFields, Signer};
use rampart_core::replay::fingerprint::canonical_json;
use rampart_core::DecideRequest;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null)),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("requestTime".to_string()),
                    Just("nonce".to_string()),
                    ".{0,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn canonical_query_is_idempotent_and_order_insensitive(parts in prop::collection::vec("[^&]{0,12}", 0..10)) {
        let q = parts.join("&");
        let c = canonical_query(&q);
        prop_assert_eq!(canonical_query(&c), c.clone());
        let mut rev = parts.clone();
        rev.reverse();
        prop_assert_eq!(canonical_query(&rev.join("&")), c);
    }

    #[test]
    fn signing_round_trips_and_any_other_signature_fails(
        app in ".{0,16}", method in "[A-Za-z]{0,8}", path in ".{0,40}", query in ".{0,40}",
        ts in ".{0,20}", nonce in ".{0,70}", body in prop::collection::vec(any::<u8>(), 0..200),
        other in ".{0,80}",
    ) {
        let hash = body_sha256_hex(&body);
        let f = SignedFields { app: &app, method: &method, path: &path, query: &query, timestamp: &ts, nonce: &nonce, body_sha256: &hash };
        let s = Signer::new(b"k");
        let sig = s.sign(&f);
        prop_assert!(s.verify(&f, &sig).is_ok());
        if !other.eq_ignore_ascii_case(&sig) {
            prop_assert!(s.verify(&f, &other).is_err());
        }
    }

    #[test]
    fn keyrings_pass_exactly_the_headers_that_carry_a_matching_entry(
        nonce in "[A-Za-z0-9]{16,24}", header in ".{0,300}", key_id in proptest::option::of(".{0,12}"),
        extra in prop::collection::vec("[0-9a-f]{64}", 0..5), at in 0usize..5, now in any::<i64>(),
    ) {
        use rampart_core::replay::keys::{Keyring, SigningKey, MAX_ENTRIES};
        let hash = body_sha256_hex(b"");
        let f = SignedFields { app: "a", method: "GET", path: "/", query: "", timestamp: "1", nonce: &nonce, body_sha256: &hash };
        let ring = Keyring::new(
            vec![SigningKey::new("k1", b"one", None, None), SigningKey::new("k2", b"two", None, None)],
            ["k0".to_string()],
        ).unwrap();
        // Arbitrary text passes only if it carries k1's or k2's MAC.
        let good = [Signer::new(b"one").sign(&f), Signer::new(b"two").sign(&f)];
        if let Ok(k) = ring.verify(&f, &header, key_id.as_deref(), now) {
            let i = usize::from(k.id() == "k2");
            prop_assert!(header.to_ascii_lowercase().contains(&good[i][3..]));
        }
        // A list of entries passes, without a key id, when one of them is a good one and there
        // are at most four.
        let mut entries: Vec<String> = extra.iter().map(|h| format!("v1={h}")).collect();
        entries.insert(at.min(entries.len()), good[1].clone());
        let list = entries.join(",");
        let r = ring.verify(&f, &list, None, now);
        prop_assert_eq!(r.is_ok(), entries.len() <= MAX_ENTRIES, "{}", list);
    }

    #[test]
    fn canonical_json_is_a_fixed_point_and_ignores_key_order(v in json_value()) {
        let vol = vec!["requestTime".to_string(), "nonce".to_string()];
        let c = canonical_json(&v, &vol);
        let back: Value = serde_json::from_str(&c).expect("canonical JSON parses");
        prop_assert_eq!(canonical_json(&back, &vol), c);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_request_parser(data in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = serde_json::from_slice::<DecideRequest>(&data);
    }
}

const FUZZ_NOW: i64 = 1_700_000_000_000;

/// The `decide` fuzz target's engine: app `demo`, local stores, no rules.
fn fuzz_engine() -> &'static rampart_core::Engine {
    use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy};
    use rampart_core::replay::bloom::SlicedBloomConfig;
    static E: std::sync::OnceLock<rampart_core::Engine> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        rampart_core::Engine::new(
            rampart_core::engine::EngineSettings {
                apps: vec![AppPolicy::new("demo", b"demo-secret", 5_000)],
                routes: vec![],
                default_dedup: DedupPolicy::default(),
                on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
                challenge_status: 401,
            },
            std::sync::Arc::new(rampart_core::replay::nonce::BloomNonceStore::new(
                SlicedBloomConfig {
                    expected_rps: 10_000,
                    slice_ms: 250,
                    retention_ms: 10_000,
                    max_window_ms: 5_000,
                    target_fp: 1e-6,
                },
                1,
            )),
            std::sync::Arc::new(
                rampart_core::replay::fingerprint::LocalFingerprintStore::new(100_000),
            ),
            std::sync::Arc::new(rampart_core::rules::LiveRules::empty()),
        )
    })
}

/// The `decide` fuzz harness signs what it is given, so arbitrary requests reach the steps after
/// the signature: mutated copies of a signed request (another body, path, user, nonce) are
/// judged by the nonce and fingerprint steps, and the same input twice is a replay. Unsigned
/// (as the harness used to send them) every one of them stops at the signature.
#[test]
fn the_decide_fuzz_harness_gets_past_the_signature() {
    use rampart_core::model::Code;
    let e = fuzz_engine();
    let variants = [
        r#"{"app":"demo","request":{"method":"POST","path":"/api/fz/pay","body":"{\"a\":1}"},"user_id":"f1"}"#,
        r#"{"app":"demo","request":{"method":"PUT","path":"/api/fz//x/","query":"b=1&a=2","body_sha256":"AB00000000000000000000000000000000000000000000000000000000000000"},"client":{"ip":"192.0.2.1"}}"#,
        r#"{"app":"demo","request":{"path":"/api/fz/y","headers":{"X-Nonce":"fz-nonce-000000000001","x-signature":"v1=00"}}}"#,
        r#"{"app":"demo","request":{"path":"/api/fz/z","headers":{"x-timestamp":"1700000001000"}}}"#,
    ];
    for text in variants {
        let unsigned: DecideRequest = serde_json::from_str(text).unwrap();
        let v = e.decide(&unsigned, FUZZ_NOW).unwrap();
        assert!(
            matches!(v.code, Code::SignatureMissing | Code::SignatureInvalid),
            "{text}: {:?}",
            v.code
        );
        let mut signed = unsigned.clone();
        rampart_core::replay::sign::sign_for_fuzzing(&mut signed, b"demo-secret", FUZZ_NOW);
        let first = e.decide(&signed, FUZZ_NOW).unwrap();
        assert_eq!(first.code, Code::Ok, "{text}: {first:?}");
        let again = e.decide(&signed, FUZZ_NOW).unwrap();
        assert_eq!(again.code, Code::ReplayDuplicate, "{text}");
    }
}

#[test]
fn fuzz_seeds_and_regressions_hold() {
    let root = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../fuzz/seeds");
    let mut seen = 0;
    for target in [
        "canonical",
        "fingerprint",
        "decide",
        "waf",
        "bundle",
        "authz",
    ] {
        for entry in std::fs::read_dir(root.join(target)).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            seen += 1;
            match target {
                "fingerprint" => {
                    if let Ok(v) = serde_json::from_slice::<Value>(&data) {
                        let c = canonical_json(&v, &[]);
                        let back: Value = serde_json::from_str(&c).unwrap();
                        assert_eq!(canonical_json(&back, &[]), c);
                    }
                }
                "decide" => {
                    if let Ok(mut req) = serde_json::from_slice::<DecideRequest>(&data) {
                        rampart_core::replay::sign::sign_for_fuzzing(
                            &mut req,
                            b"demo-secret",
                            FUZZ_NOW,
                        );
                        let _ = fuzz_engine().decide(&req, FUZZ_NOW);
                    }
                }
                "bundle" => {
                    // Byte 0 = 0: a whole document. Nothing verifies under a key that signed
                    // nothing here.
                    let key =
                        rampart_core::lifecycle::bundle::SecretKey::from_seed([7; 32]).public("ci");
                    if let Some((0, rest)) = data.split_first() {
                        if let Ok(b) = rampart_core::lifecycle::bundle::Bundle::parse(rest) {
                            assert!(b.verify(std::slice::from_ref(&key), false).is_err());
                        }
                    }
                }
                "authz" => {
                    // The forward-auth target's input: the check request's path, then headers.
                    let text = String::from_utf8_lossy(&data);
                    let mut lines = text.split('\n');
                    let pq = lines.next().unwrap_or("/v1/authz");
                    let headers: Vec<(&str, &str)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim(), v))
                        .take(64)
                        .collect();
                    let check = rampart_core::forward::CheckRequest {
                        headers: &headers,
                        method: "GET",
                        path_and_query: pq,
                        peer_ip: Some("127.0.0.1"),
                    };
                    if let Ok(d) = check.to_decide() {
                        assert!(d.request.path.starts_with('/') && !d.request.path.contains('?'));
                        assert!(!d.app.is_empty() && d.app.trim() == d.app);
                    }
                }
                "waf" => {
                    // Crash inputs kept from fuzzing (multi-byte characters at slice bounds).
                    let text = String::from_utf8_lossy(&data);
                    let _ = rampart_core::waf::scan_value(&text);
                    let mut p = text.splitn(4, '\0');
                    let (path, query, body, header) = (
                        p.next().unwrap_or("/"),
                        p.next().unwrap_or(""),
                        p.next().unwrap_or(""),
                        p.next().unwrap_or(""),
                    );
                    let _ = rampart_core::waf::scan_request(
                        path,
                        query,
                        body,
                        None,
                        [("user-agent", header), ("cookie", header)].into_iter(),
                    );
                }
                _ => {
                    let text = String::from_utf8_lossy(&data);
                    let q = canonical_query(&text);
                    assert_eq!(canonical_query(&q), q);
                }
            }
        }
    }
    assert!(seen >= 3);
}
