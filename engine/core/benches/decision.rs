//! The pieces of a decision, and a whole decision without HTTP, on one core:
//!
//! - `hmac/verify`: checking a v1 signature (canonical string + HMAC-SHA256, constant-time compare);
//! - `fingerprint`: canonical JSON of the params and the 128-bit submission fingerprint;
//! - `gcra`: one rate-limit check in the in-process limiter (keys rotating over 10,000 users);
//! - `decision/whole`: `Engine::decide` on a signed request with the default rule set, local
//!   state and a fresh nonce per call (the anti-replay core, three tiers, the score);
//! - `decision/traced`: the same with a trace of every step and rule (what the console's trace
//!   costs; the live path never traces);
//! - `signature/passes`: `Engine::decide` on a request whose signature verifies and whose
//!   timestamp is outside the window, with no rules: request checks, the signature step as the
//!   engine runs it (the app's keys looked up, the header read, canonical string, HMAC, compare),
//!   then the window step refuses — so nothing is written and the same request can be repeated;
//! - `signature/refused`: the same request with a forged signature (stops at the signature step);
//! - `keys/*`: the keyring's check alone (`Keyring::verify`): one key and one entry (what
//!   `hmac/verify` does, through the keyring), a client mid-roll (two entries, three active keys,
//!   the match on the oldest: three HMACs), and the same naming its key in `x-key-id` (one HMAC).
//!
//! - `parse/from_slice`, `parse/from_str`: a `/v1/decide` body like the load test's (a signed
//!   search with a browser's ten headers, 770 bytes) parsed into a `DecideRequest` from bytes,
//!   and from text after one check of the whole body's UTF-8 (what the server does).
//!
//! Run: `cargo bench -p rampart-core --bench decision`.

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use rampart_core::engine::EngineSettings;
use rampart_core::model::{DecideRequest, JudgedRequest};
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy};
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::canonical::{SignedFields, Signer};
use rampart_core::replay::fingerprint::{
    canonical_json, fingerprint, LocalFingerprintStore, Submission,
};
use rampart_core::replay::keys::{Keyring, SigningKey};
use rampart_core::replay::nonce::BloomNonceStore;
use rampart_core::replay::sign::{sign, ToSign};
use rampart_core::rules::{LiveRules, RuleSet, RuleSettings, RuleState, Source};
use rampart_core::store::limits::{LimiterStore, LocalLimiter};
use rampart_core::Engine;

const SECRET: &[u8] = b"bench-secret-0123456789";

fn rule_sources() -> Vec<Source> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == "samples") {
                    continue;
                }
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x != "md") {
                out.push(Source {
                    path: p
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                    text: std::fs::read_to_string(&p).unwrap_or_default(),
                });
            }
        }
    }
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../rules");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

fn engine() -> Engine {
    let state = RuleState::local(1 << 22);
    let set = RuleSet::compile(&rule_sources(), RuleSettings::default(), &state)
        .expect("default rules compile");
    engine_with(set)
}

fn engine_with(set: RuleSet) -> Engine {
    Engine::new(
        EngineSettings {
            apps: vec![AppPolicy::new("shop", SECRET, 5_000)],
            routes: vec![],
            default_dedup: DedupPolicy::default(),
            on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
            challenge_status: 403,
        },
        Arc::new(BloomNonceStore::new(
            SlicedBloomConfig {
                expected_rps: 1_000_000,
                slice_ms: 1_000,
                retention_ms: 12_000,
                max_window_ms: 5_000,
                target_fp: 1e-6,
            },
            8,
        )),
        Arc::new(LocalFingerprintStore::new(1 << 22)),
        Arc::new(LiveRules::new(set)),
    )
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A signed benign cart request with a fresh nonce, user and parameters.
fn request(now: i64) -> DecideRequest {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let body = format!(
        "{{\"sku\":{},\"qty\":1,\"cart\":\"c-{n}\"}}",
        1000 + n % 5000
    );
    let nonce = format!("bench-nonce-{n:016x}");
    let h = sign(
        SECRET,
        &ToSign {
            app: "shop",
            method: "POST",
            path: "/api/cart/add",
            query: "",
            body: body.as_bytes(),
            timestamp_ms: now,
            nonce: &nonce,
        },
    );
    let mut r = JudgedRequest {
        method: "POST".into(),
        path: "/api/cart/add".into(),
        body: Some(body),
        ..Default::default()
    };
    for (k, v) in [
        ("x-timestamp", h.timestamp),
        ("x-nonce", h.nonce),
        ("x-signature", h.signature),
        ("content-type", "application/json".into()),
        (
            "user-agent",
            "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36"
                .into(),
        ),
    ] {
        r.headers.insert(k.into(), v);
    }
    let mut d = DecideRequest {
        app: "shop".into(),
        request: r,
        user_id: Some(format!("u-{}", n % 100_000)),
        params: Some(serde_json::json!({"sku": 1000 + n % 5000, "cart": format!("c-{n}")})),
        ..Default::default()
    };
    d.client.ip = Some(format!(
        "10.{}.{}.{}",
        (n >> 16) % 256,
        (n >> 8) % 256,
        1 + n % 250
    ));
    d.client.country = Some("DE".into());
    d.client.device_id = Some(format!("dev-{}", n % 100_000));
    d
}

fn bench(c: &mut Criterion) {
    let signer = Signer::new(SECRET);
    let fields = SignedFields {
        app: "shop",
        method: "POST",
        path: "/api/cart/add",
        query: "b=2&a=1",
        timestamp: "1796100000000",
        nonce: "bench-nonce-0000000000000001",
        body_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    };
    let sig = signer.sign(&fields);
    c.bench_function("hmac/verify", |b| {
        b.iter(|| black_box(signer.verify(black_box(&fields), black_box(&sig)).is_ok()))
    });
    let one = Keyring::single(SECRET);
    c.bench_function("keys/one-key", |b| {
        b.iter(|| {
            black_box(
                one.verify(black_box(&fields), black_box(&sig), None, 0)
                    .is_ok(),
            )
        })
    });
    let three = Keyring::new(
        vec![
            SigningKey::new("old", SECRET, None, None),
            SigningKey::new("new", b"new-secret", None, None),
            SigningKey::new("next", b"next-secret", None, None),
        ],
        [],
    )
    .unwrap();
    let roll = format!("{},{sig}", Signer::new(b"other").sign(&fields));
    c.bench_function("keys/roll-3-keys", |b| {
        b.iter(|| {
            black_box(
                three
                    .verify(black_box(&fields), black_box(&roll), None, 0)
                    .is_ok(),
            )
        })
    });
    c.bench_function("keys/named", |b| {
        b.iter(|| {
            black_box(
                three
                    .verify(black_box(&fields), black_box(&roll), Some("old"), 0)
                    .is_ok(),
            )
        })
    });

    let params = serde_json::json!({"cart": "c-77", "sku": 1042, "items": [{"id": 1, "qty": 2}, {"id": 9, "qty": 1}], "requestTime": 1796100000000u64});
    let volatile = vec!["requestTime".to_string()];
    c.bench_function("fingerprint", |b| {
        b.iter(|| {
            let p = canonical_json(black_box(&params), &volatile);
            black_box(fingerprint(&Submission {
                app: "shop",
                user: "u:u-1001",
                method: "POST",
                path: "/api/cart/add",
                canonical_query: "",
                canonical_params: &p,
            }))
        })
    });

    let limiter = LocalLimiter::new(1 << 20);
    let keys: Vec<String> = (0..10_000).map(|i| format!("rl:user:u-{i}")).collect();
    let mut i = 0usize;
    let mut now = 1_796_100_000_000i64;
    c.bench_function("gcra", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            now += 1;
            black_box(limiter.gcra(&keys[i], now, 20.0, 40).unwrap().allowed)
        })
    });

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let bare = engine_with(RuleSet::empty(RuleSettings::default()));
    // Signed a minute ago: the signature passes, the ±5 s window refuses.
    let stale = request(now - 60_000);
    assert_eq!(
        bare.decide(&stale, now).unwrap().code,
        rampart_core::Code::TimestampSkew
    );
    c.bench_function("signature/passes", |b| {
        b.iter(|| black_box(bare.decide(black_box(&stale), now).unwrap().code))
    });
    let mut forged = stale.clone();
    forged
        .request
        .headers
        .insert("x-signature".into(), format!("v1={}", "ab".repeat(32)));
    assert_eq!(
        bare.decide(&forged, now).unwrap().code,
        rampart_core::Code::SignatureInvalid
    );
    c.bench_function("signature/refused", |b| {
        b.iter(|| black_box(bare.decide(black_box(&forged), now).unwrap().code))
    });

    let bodies: Vec<Vec<u8>> = (0..256u64).map(decide_body).collect();
    let mut i = 0;
    c.bench_function("parse/from_slice", |b| {
        b.iter(|| {
            i = (i + 1) % bodies.len();
            black_box(serde_json::from_slice::<DecideRequest>(&bodies[i]).unwrap())
        })
    });
    c.bench_function("parse/from_str", |b| {
        b.iter(|| {
            i = (i + 1) % bodies.len();
            let text = std::str::from_utf8(&bodies[i]).unwrap();
            black_box(serde_json::from_str::<DecideRequest>(text).unwrap())
        })
    });
    let e = engine();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Requests are built outside the timed part (signing is the client's work).
    c.bench_function("decision/whole", |b| {
        b.iter_batched(
            || request(now),
            |r| black_box(e.decide(&r, now).unwrap().code),
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("decision/traced", |b| {
        b.iter_batched(
            || request(now),
            |r| black_box(e.decide_traced(&r, now).unwrap().0.code),
            criterion::BatchSize::SmallInput,
        )
    });
}

/// A `/v1/decide` body shaped like `rampart-load`'s signed search (the signature is not checked
/// by the parse).
fn decide_body(n: u64) -> Vec<u8> {
    format!(
        r#"{{"app":"shop","request":{{"method":"GET","path":"/api/products","query":"q=running+shoes+{n}&category=women&page=2&sort=price_asc","body":"","headers":{{"x-timestamp":"1765000000000","x-nonce":"load0000abcd0001{n:012x}","x-signature":"v1=3f7a9c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a","content-type":"application/json","user-agent":"Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36","accept":"application/json","accept-language":"de-DE,de;q=0.9,en;q=0.8","referer":"https://shop.example/c/{}?page={}","cookie":"sid={:016x}; cart=c-{n:x}; consent=1"}}}},"client":{{"ip":"10.1.2.{}","country":"DE","device_type":"mobile","device_id":"dev-{n}"}},"user_id":"u{}","params":{{"q":"running shoes {n}","category":"women","page":2}}}}"#,
        n % 97,
        n % 7,
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        1 + n % 250,
        n % 20_000
    )
    .into_bytes()
}

criterion_group!(benches, bench);
criterion_main!(benches);
