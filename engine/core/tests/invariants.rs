//! DESIGN §2 invariants, proven through the whole decision path on the in-process stores, with a
//! small window so the tests run fast.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use rampart_core::engine::EngineSettings;
use rampart_core::model::{Action, Code, DecideRequest, JudgedRequest};
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy, RoutePolicy};
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::fingerprint::LocalFingerprintStore;
use rampart_core::replay::nonce::{BloomNonceStore, ExactNonceStore, NonceStore};
use rampart_core::replay::sign::{sign, ToSign};
use rampart_core::rules::LiveRules;
use rampart_core::Engine;
use serde_json::json;

const SECRET: &[u8] = b"test-secret";
const W: i64 = 200;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Bloom,
    Exact,
}

fn nonce_store(mode: Mode) -> Arc<dyn NonceStore> {
    match mode {
        Mode::Bloom => Arc::new(BloomNonceStore::new(
            SlicedBloomConfig {
                expected_rps: 50_000,
                slice_ms: 50,
                retention_ms: 2 * W,
                max_window_ms: W,
                target_fp: 1e-6,
            },
            0xfeed,
        )),
        Mode::Exact => Arc::new(ExactNonceStore::new(2 * W, 1_000_000)),
    }
}

fn engine(mode: Mode) -> Engine {
    engine_with(nonce_store(mode), FailPolicy::Deny)
}

fn engine_with(nonces: Arc<dyn NonceStore>, on_store_error: FailPolicy) -> Engine {
    engine_full(nonces, 1_000_000, vec![], on_store_error)
}

fn engine_full(
    nonces: Arc<dyn NonceStore>,
    max_fingerprints: usize,
    routes: Vec<RoutePolicy>,
    on_store_error: FailPolicy,
) -> Engine {
    Engine::new(
        EngineSettings {
            apps: vec![AppPolicy::new("shop", SECRET, W)],
            routes,
            default_dedup: DedupPolicy::default(),
            on_store_error: rampart_core::StorePolicies::all(on_store_error),
            challenge_status: 401,
        },
        nonces,
        Arc::new(LocalFingerprintStore::new(max_fingerprints)),
        Arc::new(LiveRules::empty()),
    )
}

fn request(nonce: &str, ts: i64, body: &str) -> DecideRequest {
    request_to("POST", "/api/order/pay", nonce, ts, body)
}

fn request_to(method: &str, path: &str, nonce: &str, ts: i64, body: &str) -> DecideRequest {
    let h = sign(
        SECRET,
        &ToSign {
            app: "shop",
            method,
            path,
            query: "b=2&a=1",
            body: body.as_bytes(),
            timestamp_ms: ts,
            nonce,
        },
    );
    let mut r = JudgedRequest {
        method: method.into(),
        path: path.into(),
        query: "b=2&a=1".into(),
        body: Some(body.into()),
        ..Default::default()
    };
    r.headers.insert("x-timestamp".into(), h.timestamp);
    r.headers.insert("x-nonce".into(), h.nonce);
    r.headers.insert("x-signature".into(), h.signature);
    DecideRequest {
        app: "shop".into(),
        request: r,
        ..Default::default()
    }
}

fn code(e: &Engine, r: &DecideRequest, now: i64) -> Code {
    e.decide(r, now).expect("valid call").code
}

#[test]
fn replays_rejected_at_both_window_edges_across_rotations() {
    for mode in [Mode::Bloom, Mode::Exact] {
        let e = engine(mode);
        let base = 1_000_000;
        // First seen at the future edge (ts = now + W), replayed until the past edge (now = ts + W):
        // the full 2W span, crossing many slice rotations.
        for i in 0..40 {
            let ts = base + i * 37;
            let first = ts - W;
            let r = request(&format!("edge-future-{i:010}"), ts, "{}");
            e.maintain(first);
            assert_eq!(code(&e, &r, first), Code::Ok, "{mode:?}");
            for now in (first + 1..=ts + W).step_by(13).chain([ts + W]) {
                e.maintain(now);
                assert_eq!(
                    code(&e, &r, now),
                    Code::ReplayDuplicate,
                    "{mode:?} i={i} now={now}"
                );
            }
            // One ms later the window itself rejects it, as skew (never as a parameter error).
            assert_eq!(code(&e, &r, ts + W + 1), Code::TimestampSkew);
        }
        // First seen at the past edge (ts = now − W): the window closes right after.
        let ts = base + 10_000;
        let r = request("edge-past-00000000", ts, "{}");
        assert_eq!(code(&e, &r, ts + W), Code::Ok);
        assert_eq!(code(&e, &r, ts + W), Code::ReplayDuplicate);
        assert_eq!(code(&e, &r, ts + W + 1), Code::TimestampSkew);
    }
}

#[test]
fn exactly_one_of_64_concurrent_identical_requests_passes() {
    for mode in [Mode::Bloom, Mode::Exact] {
        let e = Arc::new(engine(mode));
        for round in 0..20 {
            let now = 5_000_000 + round * 10;
            let r = Arc::new(request(&format!("race-{round:012}"), now, "{\"x\":1}"));
            let barrier = Arc::new(Barrier::new(64));
            let allowed = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..64)
                .map(|_| {
                    let (e, r, b, a) = (e.clone(), r.clone(), barrier.clone(), allowed.clone());
                    std::thread::spawn(move || {
                        b.wait();
                        let v = e.decide(&r, now).unwrap();
                        match v.code {
                            Code::Ok => {
                                a.fetch_add(1, Ordering::SeqCst);
                            }
                            c => assert_eq!(c, Code::ReplayDuplicate),
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(allowed.load(Ordering::SeqCst), 1, "{mode:?} round {round}");
        }
    }
}

#[test]
fn bad_signature_never_consumes_the_nonce() {
    for mode in [Mode::Bloom, Mode::Exact] {
        let e = engine(mode);
        let now = 2_000_000;
        let good = request("keep-me-unused-0001", now, "{\"a\":1}");
        let mut forged = good.clone();
        forged.request.body = Some("{\"a\":2}".into());
        for _ in 0..5 {
            assert_eq!(code(&e, &forged, now), Code::SignatureInvalid);
        }
        // A stale (out of window) copy must not consume it either.
        let stale = request("keep-me-unused-0002", now - 10 * W, "{}");
        assert_eq!(code(&e, &stale, now), Code::TimestampSkew);
        assert_eq!(code(&e, &good, now), Code::Ok, "{mode:?}");
        assert_eq!(
            code(&e, &request("keep-me-unused-0002", now, "{}"), now),
            Code::Ok
        );
    }
}

#[test]
fn a_flood_of_forged_requests_leaves_the_nonce_store_untouched() {
    for mode in [Mode::Bloom, Mode::Exact] {
        let store = nonce_store(mode);
        let e = engine_with(store.clone(), FailPolicy::Deny);
        let now = 4_000_000;
        let before = store.stats(now);
        // 20,000 requests an attacker can make without the secret, each with a fresh nonce:
        // forged signatures, a body changed after signing, stale and future timestamps, an
        // unknown app, a missing signature.
        for i in 0..20_000u32 {
            let nonce = format!("flood-{i:016}");
            let mut r = request(&nonce, now, "{}");
            match i % 6 {
                0 => {
                    r.request
                        .headers
                        .insert("x-signature".into(), format!("v1={:064x}", i));
                }
                1 => r.request.body = Some("{\"x\":1}".into()),
                2 => r = request(&nonce, now - 10 * W, "{}"),
                3 => r = request(&nonce, now + 10 * W, "{}"),
                4 => r.app = "no-such-app".into(),
                _ => {
                    r.request.headers.remove("x-signature");
                }
            }
            assert_ne!(e.decide(&r, now).map(|v| v.code).ok(), Some(Code::Ok));
        }
        let after = store.stats(now);
        assert_eq!(after.entries, before.entries, "{mode:?}");
        assert_eq!(after.fill_ratio, before.fill_ratio, "{mode:?}");
        // The store still works: one genuine request is recorded.
        assert_eq!(
            code(&e, &request("flood-genuine-0001", now, "{}"), now),
            Code::Ok
        );
        assert!(store.stats(now).entries > before.entries, "{mode:?}");
    }
}

#[test]
fn a_full_exact_store_answers_by_the_declared_policy_and_never_forgets_a_nonce() {
    let now = 5_000_000;
    for policy in [FailPolicy::Deny, FailPolicy::Allow] {
        let e = engine_with(Arc::new(ExactNonceStore::new(2 * W, 100)), policy);
        // Fill it: fresh nonces pass until the store has no room.
        let mut accepted = Vec::new();
        let first_refusal = (0..1_000)
            .map(|i| request(&format!("fill-{policy:?}-{i:012}"), now, "{}"))
            .find_map(|r| {
                let v = e.decide(&r, now).unwrap();
                if v.code == Code::Ok && !v.degraded {
                    accepted.push(r);
                    None
                } else {
                    Some(v)
                }
            })
            .expect("a 100-entry store fills up");
        assert!(accepted.len() >= 100, "{}", accepted.len());
        match policy {
            // Fail closed: never a pass for a nonce that could not be recorded.
            FailPolicy::Deny => {
                assert_eq!(
                    (first_refusal.code, first_refusal.status),
                    (Code::StoreUnavailable, 503)
                );
                assert!(!first_refusal.degraded);
            }
            // Fail open, as declared: it passes, marked degraded.
            FailPolicy::Allow => {
                assert_eq!(first_refusal.code, Code::Ok);
                assert!(first_refusal.degraded);
            }
        }
        // Whatever the policy, every nonce already recorded is still a replay.
        for r in accepted.iter().step_by(7) {
            assert_eq!(code(&e, r, now), Code::ReplayDuplicate, "{policy:?}");
        }
    }
}

/// A user's submission to `path`: a fresh nonce and timestamp each time (as a client retry makes),
/// the same business parameters.
fn submission(
    method: &str,
    path: &str,
    nonce: &str,
    now: i64,
    params: serde_json::Value,
) -> DecideRequest {
    let mut r = request_to(method, path, nonce, now, &params.to_string());
    r.user_id = Some("u-42".into());
    r
}

fn route(path: &str, window_ms: Option<i64>, dedup: DedupPolicy) -> RoutePolicy {
    RoutePolicy {
        app: None,
        path: path.into(),
        dedup,
        window_ms,
    }
}

#[test]
fn a_route_window_narrows_the_apps_window_and_never_widens_it() {
    let narrow = 50;
    let routes = vec![
        // A broad entry first (for its dedup settings): it must not hide the narrower window.
        route("/api/*", None, DedupPolicy::default()),
        route("/api/order/pay", Some(narrow), DedupPolicy::default()),
        // Wider than the app's W: the app's window still applies.
        route("/api/wide", Some(10 * W), DedupPolicy::default()),
    ];
    for mode in [Mode::Bloom, Mode::Exact] {
        let e = engine_full(
            nonce_store(mode),
            1_000_000,
            routes.clone(),
            FailPolicy::Deny,
        );
        let now = 7_000_000;
        for (i, ts) in [now - narrow, now + narrow].into_iter().enumerate() {
            let r = request_to(
                "GET",
                "/api/order/pay",
                &format!("narrow-in-{i:08}"),
                ts,
                "",
            );
            assert_eq!(code(&e, &r, now), Code::Ok, "{mode:?} ts={ts}");
        }
        for (i, ts) in [now - narrow - 1, now + narrow + 1].into_iter().enumerate() {
            let r = request_to(
                "GET",
                "/api/order/pay",
                &format!("narrow-out-{i:08}"),
                ts,
                "",
            );
            let v = e.decide(&r, now).unwrap();
            assert_eq!((v.code, v.status), (Code::TimestampSkew, 401), "{mode:?}");
            assert_eq!(v.server_time_ms, Some(now));
            assert!(
                v.reasons[0].message.contains(&format!("±{narrow} ms")),
                "{:?}",
                v.reasons
            );
            // Refused by the window, so the nonce was not consumed: in the window it passes.
            let r = request_to(
                "GET",
                "/api/order/pay",
                &format!("narrow-out-{i:08}"),
                now,
                "",
            );
            assert_eq!(code(&e, &r, now), Code::Ok);
        }
        // Other routes keep the app's window.
        let r = request_to("GET", "/api/other", "other-route-0001", now - W, "");
        assert_eq!(code(&e, &r, now), Code::Ok);
        let r = request_to("GET", "/api/wide", "wide-route-00001", now - W, "");
        assert_eq!(code(&e, &r, now), Code::Ok);
        let r = request_to("GET", "/api/wide", "wide-route-00002", now - W - 1, "");
        assert_eq!(
            code(&e, &r, now),
            Code::TimestampSkew,
            "a route cannot widen"
        );
    }
}

#[test]
fn a_full_fingerprint_store_answers_by_the_declared_policy_and_never_forgets() {
    let now = 8_000_000;
    for policy in [FailPolicy::Deny, FailPolicy::Allow] {
        let e = engine_full(nonce_store(Mode::Exact), 50, vec![], policy);
        let mut n = 0;
        let mut nonce = || {
            n += 1;
            format!("fp-full-{policy:?}-{n:08}")
        };
        let mut recorded = Vec::new();
        let refused = (0..500)
            .find_map(|i| {
                let p = json!({ "order": i });
                let v = e
                    .decide(
                        &submission("POST", "/api/order/pay", &nonce(), now, p.clone()),
                        now,
                    )
                    .unwrap();
                if v.code == Code::Ok && !v.degraded {
                    recorded.push(p);
                    None
                } else {
                    Some(v)
                }
            })
            .expect("a 50-entry fingerprint store fills up");
        assert_eq!(recorded.len(), 50);
        match policy {
            FailPolicy::Deny => assert_eq!(
                (refused.code, refused.status, refused.step),
                (
                    Code::StoreUnavailable,
                    503,
                    rampart_core::model::Step::Fingerprint
                )
            ),
            FailPolicy::Allow => assert!(refused.code == Code::Ok && refused.degraded),
        }
        // Full or not, what was recorded is still a duplicate (never an allow).
        for p in &recorded {
            let r = submission("POST", "/api/order/pay", &nonce(), now + 10, p.clone());
            assert_eq!(
                code(&e, &r, now + 10),
                Code::DuplicateSubmission,
                "{policy:?}"
            );
        }
        // After the window, housekeeping makes room and new submissions are recorded again.
        let later = now + 1_001;
        e.maintain(later);
        let r = submission(
            "POST",
            "/api/order/pay",
            &nonce(),
            later,
            json!({ "order": "new" }),
        );
        let v = e.decide(&r, later).unwrap();
        assert!(v.code == Code::Ok && !v.degraded, "{v:?}");
    }
}

#[test]
fn retries_with_one_idempotency_key_are_one_submission() {
    let e = engine(Mode::Exact);
    let now = 9_000_000;
    let op = |key: &str, t: i64| json!({ "idempotency_key": key, "amount": 5, "requestTime": t });
    // A client (or a gateway) retries with a new nonce and timestamp: the nonce step cannot see it.
    let first = submission(
        "POST",
        "/api/order/pay",
        "retry-nonce-00001",
        now,
        op("ord-1", now),
    );
    assert_eq!(code(&e, &first, now), Code::Ok);
    for (i, t) in [now + 100, now + 400, now + 999].into_iter().enumerate() {
        let retry = submission(
            "POST",
            "/api/order/pay",
            &format!("retry-nonce-1{i:04}"),
            t,
            op("ord-1", t),
        );
        let v = e.decide(&retry, t).unwrap();
        assert_eq!(
            (v.code, v.status),
            (Code::DuplicateSubmission, 409),
            "retry {i}"
        );
    }
    // The very same request again is a replay, reported as such.
    assert_eq!(code(&e, &first, now + 5), Code::ReplayDuplicate);
    // A new operation has a new key and passes at once.
    let other = submission(
        "POST",
        "/api/order/pay",
        "retry-nonce-20000",
        now + 500,
        op("ord-2", now + 500),
    );
    assert_eq!(code(&e, &other, now + 500), Code::Ok);
    // Past the dedup window the same key is a new submission (the app decides beyond that).
    let t = now + 1_001;
    let late = submission(
        "POST",
        "/api/order/pay",
        "retry-nonce-30000",
        t,
        op("ord-1", t),
    );
    assert_eq!(code(&e, &late, t), Code::Ok);
}

#[test]
fn route_overrides_apply_to_their_route_only() {
    let payments = DedupPolicy {
        window_ms: 5_000,
        methods: vec!["POST".into()],
        volatile_fields: vec!["client_clock".into()],
    };
    let off = DedupPolicy {
        window_ms: 0,
        ..DedupPolicy::default()
    };
    let routes = vec![
        route("/api/order/*", None, payments),
        route("/api/search", None, off),
    ];
    let e = engine_full(
        nonce_store(Mode::Exact),
        1_000_000,
        routes,
        FailPolicy::Deny,
    );
    let now = 10_000_000;
    let mut n = 0;
    let mut go = |method: &str, path: &str, t: i64, p: serde_json::Value| {
        n += 1;
        code(
            &e,
            &submission(method, path, &format!("route-ovr-{n:08}"), t, p),
            t,
        )
    };
    // The prefix route's window (5 s) replaces the default 1 s.
    assert_eq!(go("POST", "/api/order/pay", now, json!({"o": 1})), Code::Ok);
    assert_eq!(
        go("POST", "/api/order/pay", now + 3_000, json!({"o": 1})),
        Code::DuplicateSubmission
    );
    assert_eq!(
        go("POST", "/api/order/pay", now + 5_001, json!({"o": 1})),
        Code::Ok
    );
    // Elsewhere the default 1 s applies.
    assert_eq!(go("POST", "/api/cart/add", now, json!({"o": 1})), Code::Ok);
    assert_eq!(
        go("POST", "/api/cart/add", now + 1_001, json!({"o": 1})),
        Code::Ok
    );
    // Its volatile_fields replace the defaults: client_clock is ignored, ts no longer is.
    let t = now + 20_000;
    assert_eq!(
        go(
            "POST",
            "/api/order/refund",
            t,
            json!({"o": 2, "client_clock": 1})
        ),
        Code::Ok
    );
    assert_eq!(
        go(
            "POST",
            "/api/order/refund",
            t + 1,
            json!({"o": 2, "client_clock": 2})
        ),
        Code::DuplicateSubmission
    );
    assert_eq!(
        go(
            "POST",
            "/api/order/refund",
            t + 2,
            json!({"o": 2, "client_clock": 3, "ts": 1})
        ),
        Code::Ok
    );
    assert_eq!(
        go(
            "POST",
            "/api/order/refund",
            t + 3,
            json!({"o": 2, "client_clock": 4, "ts": 2})
        ),
        Code::Ok
    );
    // Its methods replace the defaults: PUT is not fingerprinted there, and is elsewhere.
    assert_eq!(go("PUT", "/api/order/edit", t, json!({"o": 3})), Code::Ok);
    assert_eq!(
        go("PUT", "/api/order/edit", t + 1, json!({"o": 3})),
        Code::Ok
    );
    assert_eq!(go("PUT", "/api/profile", t, json!({"o": 3})), Code::Ok);
    assert_eq!(
        go("PUT", "/api/profile", t + 1, json!({"o": 3})),
        Code::DuplicateSubmission
    );
    // A window of 0 turns the step off on its route.
    assert_eq!(go("POST", "/api/search", t, json!({"q": "x"})), Code::Ok);
    assert_eq!(
        go("POST", "/api/search", t + 1, json!({"q": "x"})),
        Code::Ok
    );
}

#[test]
fn distinct_codes_for_each_failure() {
    let e = engine(Mode::Bloom);
    let now = 3_000_000;
    let ok = request("distinct-codes-0001", now, "{}");
    assert_eq!(code(&e, &ok, now), Code::Ok);
    assert_eq!(code(&e, &ok, now), Code::ReplayDuplicate);

    let mut missing = request("distinct-codes-0002", now, "{}");
    missing.request.headers.remove("x-signature");
    let v = e.decide(&missing, now).unwrap();
    assert_eq!(
        (v.code, v.status, v.action),
        (Code::SignatureMissing, 401, Action::Deny)
    );

    let mut bad = request("distinct-codes-0003", now, "{}");
    bad.request
        .headers
        .insert("x-signature".into(), format!("v1={}", "0".repeat(64)));
    assert_eq!(code(&e, &bad, now), Code::SignatureInvalid);

    let skewed = request("distinct-codes-0004", now + W + 1, "{}");
    let v = e.decide(&skewed, now).unwrap();
    assert_eq!((v.code, v.status), (Code::TimestampSkew, 401));
    assert_eq!(v.server_time_ms, Some(now));
    assert_eq!(v.skew_ms, Some(W + 1));
    assert_eq!(v.reasons[0].skew_ms, Some(W + 1));

    let short = request("short", now, "{}");
    let v = e.decide(&short, now).unwrap();
    assert_eq!((v.code, v.status), (Code::NonceInvalid, 400));

    let mut garbage_ts = request("distinct-codes-0005", now, "{}");
    garbage_ts
        .request
        .headers
        .insert("x-timestamp".into(), "soon".into());
    // The signature covers the raw header, so tampering shows as a bad signature first.
    assert_eq!(code(&e, &garbage_ts, now), Code::SignatureInvalid);

    let mut unknown = ok.clone();
    unknown.app = "nope".into();
    assert_eq!(e.decide(&unknown, now).unwrap_err().code(), "UNKNOWN_APP");
    let mut bad_hash = ok.clone();
    bad_hash.request.body = None;
    bad_hash.request.body_sha256 = Some("xyz".into());
    assert_eq!(
        e.decide(&bad_hash, now).unwrap_err().code(),
        "INVALID_FIELD"
    );
}

#[test]
fn fingerprint_dedup_ignores_key_order_and_volatile_fields() {
    let e = engine(Mode::Bloom);
    let now = 4_000_000;
    let mut a = request("fingerprint-aaaa-01", now, "");
    a.user_id = Some("u-42".into());
    a.params = Some(
        json!({"sku": "X1", "qty": 2, "requestTime": 1, "addr": {"zip": "10115", "city": "Berlin"}}),
    );
    let mut b = request("fingerprint-aaaa-02", now + 5, "");
    b.user_id = Some("u-42".into());
    b.params = Some(
        json!({"addr": {"city": "Berlin", "zip": "10115"}, "requestTime": 2, "qty": 2, "sku": "X1"}),
    );
    assert_eq!(code(&e, &a, now), Code::Ok);
    let v = e.decide(&b, now + 5).unwrap();
    assert_eq!((v.code, v.status), (Code::DuplicateSubmission, 409));

    // Another user, other params, or after the window: not a duplicate.
    let mut c = request("fingerprint-aaaa-03", now + 6, "");
    c.user_id = Some("u-43".into());
    c.params = b.params.clone();
    assert_eq!(code(&e, &c, now + 6), Code::Ok);
    let mut d = request("fingerprint-aaaa-04", now + 7, "");
    d.user_id = Some("u-42".into());
    d.params = Some(json!({"sku": "X1", "qty": 3}));
    assert_eq!(code(&e, &d, now + 7), Code::Ok);
    let mut later = request("fingerprint-aaaa-05", now + 1000, "");
    later.user_id = Some("u-42".into());
    later.params = a.params.clone();
    assert_eq!(code(&e, &later, now + 1000), Code::Ok);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// No false negative within retention: for random nonces, timestamps and arrival times, every
    /// replay whose timestamp still passes the window is rejected.
    #[test]
    fn no_false_negative_within_retention(
        items in proptest::collection::vec((0i64..2_000, -W..=W, 0i64..=2 * W), 1..40),
        exact in any::<bool>(),
    ) {
        let e = engine(if exact { Mode::Exact } else { Mode::Bloom });
        let base = 10_000_000;
        // Each item: timestamp offset, first arrival relative to ts (within the window), replay delay.
        let mut events: Vec<(i64, usize, bool)> = Vec::new();
        for (i, (ts_off, first_rel, delay)) in items.iter().enumerate() {
            let ts = base + ts_off;
            let first = ts + first_rel;
            events.push((first, i, false));
            let replay = first + delay;
            if replay <= ts + W {
                events.push((replay, i, true));
            }
        }
        events.sort();
        let reqs: Vec<_> = items.iter().enumerate()
            .map(|(i, (ts_off, _, _))| request(&format!("prop-nonce-{i:08}"), base + ts_off, "{}"))
            .collect();
        for (now, i, is_replay) in events {
            e.maintain(now);
            let c = code(&e, &reqs[i], now);
            if is_replay {
                prop_assert_eq!(c, Code::ReplayDuplicate);
            } else {
                prop_assert_eq!(c, Code::Ok);
            }
        }
    }
}

/// Each spelling of one route (`/api//pay`, `/api/pay/`, `/api/%70ay`, `/api/x/../pay`), signed as
/// sent, is judged as that route: its window, its dedup and the rules scoped to it apply. A line
/// break in the method, path or query (which would make the canonical string ambiguous) is refused.
#[test]
fn every_spelling_of_a_route_gets_that_routes_window_dedup_and_rules() {
    use rampart_core::rules::{RuleSet, RuleSettings, RuleState, Source};
    let narrow = 50;
    let dedup = DedupPolicy {
        window_ms: 10_000,
        methods: vec!["POST".into()],
        volatile_fields: vec![],
    };
    let routes = vec![route("/api/pay", Some(narrow), dedup)];
    let forms = [
        "/api//pay",
        "/api/pay/",
        "/api/%70ay",
        "/api/x/../pay",
        "//api/./pay",
    ];
    for mode in [Mode::Bloom, Mode::Exact] {
        let e = engine_full(
            nonce_store(mode),
            1_000_000,
            routes.clone(),
            FailPolicy::Deny,
        );
        let now = 9_000_000;
        for (i, p) in forms.iter().enumerate() {
            // The route's narrow window, not the app's W.
            let r = request_to("GET", p, &format!("form-skew-{i:08}"), now - narrow - 1, "");
            assert_eq!(code(&e, &r, now), Code::TimestampSkew, "{mode:?} {p}");
            let r = request_to("GET", p, &format!("form-fresh-{i:08}"), now, "");
            assert_eq!(code(&e, &r, now), Code::Ok, "{mode:?} {p}");
        }
        // The route's dedup: a submission to /api/pay, retried through every other spelling.
        let first = submission(
            "POST",
            "/api/pay",
            "form-dedup-first0",
            now,
            json!({"o": 7}),
        );
        assert_eq!(code(&e, &first, now), Code::Ok, "{mode:?}");
        for (i, p) in forms.iter().enumerate() {
            let retry = submission(
                "POST",
                p,
                &format!("form-dedup-{i:08}"),
                now,
                json!({"o": 7}),
            );
            assert_eq!(
                code(&e, &retry, now),
                Code::DuplicateSubmission,
                "{mode:?} {p}"
            );
        }
    }

    // A rule scoped to /api/pay (metadata `routes:`) sees every spelling, and reads the normal path.
    let rules = [Source {
        path: "gateway/pay-only.rhai".into(),
        text: "//! name: pay-only\n//! priority: 10\n//! owner: test\n//! description: the pay route\n\
               //! routes: /api/pay\ndeny(\"pay route \" + req.path)\n"
            .into(),
    }];
    let set = RuleSet::compile(&rules, RuleSettings::default(), &RuleState::local(100)).unwrap();
    let e = Engine::new(
        EngineSettings {
            apps: vec![AppPolicy::new("shop", SECRET, W)],
            routes: vec![],
            default_dedup: DedupPolicy::default(),
            on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
            challenge_status: 401,
        },
        nonce_store(Mode::Exact),
        Arc::new(LocalFingerprintStore::new(1000)),
        Arc::new(LiveRules::new(set)),
    );
    let now = 9_500_000;
    for (i, p) in forms.iter().chain(["/api/pay"].iter()).enumerate() {
        let v = e
            .decide(
                &request_to("GET", p, &format!("form-rule-{i:08}"), now, ""),
                now,
            )
            .unwrap();
        assert_eq!(
            (v.code, v.rule.as_deref(), v.reasons[0].message.as_str()),
            (Code::RuleDeny, Some("pay-only"), "pay route /api/pay"),
            "{p}"
        );
    }
    let other = request_to("GET", "/api/payx", "form-rule-other-1", now, "");
    assert_eq!(code(&e, &other, now), Code::Ok);

    // Line breaks, an encoded separator: refused at the edge (rule "path"), never signed over.
    for (m, p, q) in [
        ("GET\n/x", "/api/pay", "a=1"),
        ("GET", "/api/pay\nx", "a=1"),
        ("GET", "/api/pay", "a=1\nb=2"),
        ("GET", "/api%2Fpay", "a=1"),
    ] {
        let mut r = request_to("GET", "/api/pay", "form-newline-0001", now, "");
        r.request.method = m.into();
        r.request.path = p.into();
        r.request.query = q.into();
        let v = e.decide(&r, now).unwrap();
        assert_eq!(
            (v.code, v.status, v.tier, v.rule.as_deref()),
            (Code::RuleDeny, 403, Some("edge"), Some("path")),
            "{m:?} {p:?} {q:?}"
        );
    }
    // The refusals consumed nothing: the nonce is still fresh.
    let r = request_to("GET", "/api/other", "form-newline-0001", now, "");
    assert_eq!(code(&e, &r, now), Code::Ok);
}

/// Two apps with different windows on one store (sized for the wider): each app's replays are
/// caught across its own whole acceptance span, each app's window check is its own (a timestamp
/// the narrow app refuses as skew, the wide one accepts), and one app's nonce is not another's.
#[test]
fn two_apps_with_different_windows_each_keep_their_own_span() {
    const SHORT: i64 = 200;
    const LONG: i64 = 1_000;
    for mode in [Mode::Bloom, Mode::Exact] {
        let nonces: Arc<dyn NonceStore> = match mode {
            Mode::Bloom => Arc::new(BloomNonceStore::new(
                SlicedBloomConfig {
                    expected_rps: 50_000,
                    slice_ms: 50,
                    retention_ms: 2 * LONG,
                    max_window_ms: LONG,
                    target_fp: 1e-6,
                },
                0xbeef,
            )),
            Mode::Exact => Arc::new(ExactNonceStore::new(2 * LONG, 1_000_000)),
        };
        let e = Engine::new(
            EngineSettings {
                apps: vec![
                    AppPolicy::new("short", b"short-secret", SHORT),
                    AppPolicy::new("long", b"long-secret", LONG),
                ],
                routes: vec![],
                default_dedup: DedupPolicy::default(),
                on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
                challenge_status: 401,
            },
            nonces,
            Arc::new(LocalFingerprintStore::new(1_000_000)),
            Arc::new(LiveRules::empty()),
        );
        let req = |app: &str, secret: &[u8], nonce: &str, ts: i64| {
            let mut r = JudgedRequest {
                method: "POST".into(),
                path: "/api/order/pay".into(),
                body: Some(format!("{{\"n\":\"{nonce}\"}}")),
                ..Default::default()
            };
            rampart_core::replay::sign::sign_request(secret, app, &mut r, ts, nonce);
            DecideRequest {
                app: app.into(),
                request: r,
                user_id: Some(nonce.into()),
                ..Default::default()
            }
        };
        let base = 3_000_000;
        for (k, (app, secret, w)) in [
            ("short", &b"short-secret"[..], SHORT),
            ("long", &b"long-secret"[..], LONG),
        ]
        .into_iter()
        .enumerate()
        {
            for i in 0..12 {
                // First seen at the future edge, replayed until the past edge: 2W (the clock
                // only moves forward).
                let ts = base + k as i64 * 40_000 + i * 2_500;
                let first = ts - w;
                let r = req(app, secret, &format!("{app}-two-apps-{i:08}"), ts);
                e.maintain(first);
                assert_eq!(code(&e, &r, first), Code::Ok, "{mode:?} {app} i={i}");
                for now in (first + 1..=ts + w).step_by(41).chain([ts + w]) {
                    e.maintain(now);
                    assert_eq!(
                        code(&e, &r, now),
                        Code::ReplayDuplicate,
                        "{mode:?} {app} i={i} now={now}"
                    );
                }
                assert_eq!(code(&e, &r, ts + w + 1), Code::TimestampSkew);
            }
        }
        // A timestamp SHORT + 100 ahead: skew for the narrow app, judged for the wide one.
        let now = base + 200_000;
        e.maintain(now);
        let ahead = now + SHORT + 100;
        let r = req("short", b"short-secret", "ahead-0000000000", ahead);
        assert_eq!(code(&e, &r, now), Code::TimestampSkew, "{mode:?}");
        let r = req("long", b"long-secret", "ahead-0000000000", ahead);
        assert_eq!(code(&e, &r, now), Code::Ok, "{mode:?}");
        // The same nonce in the other app is not a replay.
        let r = req("short", b"short-secret", "ahead-0000000000", now);
        assert_eq!(code(&e, &r, now), Code::Ok, "{mode:?}");
    }
}
