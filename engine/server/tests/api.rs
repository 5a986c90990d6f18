//! Contract v1 through the real actix handler stack (in process, no mocks): answers, error
//! envelopes for bad input, batch order, metrics, readiness, recent decisions and the local log.

use std::sync::Arc;

use actix_web::{test, App};
use rampart::config::Config;
use rampart::Runtime;
use rampart_core::replay::sign::{sign, ToSign};
use serde_json::{json, Value};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rampart-api-{tag}-{}-{}",
        std::process::id(),
        rampart::clock::now_ms()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn runtime(tag: &str, extra: &str) -> Arc<Runtime> {
    let dir = temp_dir(tag);
    let path = dir.join("rampart.toml");
    std::fs::write(
        &path,
        format!(
            "[[apps]]\nid = \"shop\"\nsecret = \"s3cret\"\nwindow_ms = 5000\n\
             [state]\nexpected_rps = 10000\n\
             [decision_log]\ndir = \"{}\"\n\
             [admin]\nstate_dir = \"{}\"\nallow_unsigned_uploads = true\n\
             [[admin.tokens]]\nname = \"ci\"\nrole = \"author\"\ntoken_sha256 = \"820753da26c7558d99c3756977b0c6db6222ffcd9da340181a3ccdb7ca32eafe\"\n\
             [[admin.tokens]]\nname = \"lead\"\nrole = \"admin\"\ntoken_sha256 = \"ab082793eac3b93eee18fcefcb2ea452dc6434e11d463401daadafca8959cc9f\"\n{extra}",
            dir.join("log").display(),
            dir.join("control").display()
        ),
    )
    .unwrap();
    let v = Config::load_with_env(Some(&path), std::iter::empty())
        .unwrap()
        .validate()
        .unwrap();
    Runtime::build(v).unwrap()
}

fn signed(nonce: &str, ts: i64, body: &str) -> Value {
    let h = sign(
        b"s3cret",
        &ToSign {
            app: "shop",
            method: "POST",
            path: "/api/coupon/claim",
            query: "c=SPRING&lang=en",
            body: body.as_bytes(),
            timestamp_ms: ts,
            nonce,
        },
    );
    json!({
        "app": "shop",
        "request": {
            "method": "POST", "path": "/api/coupon/claim", "query": "c=SPRING&lang=en",
            "headers": {"x-timestamp": h.timestamp, "x-nonce": h.nonce, "x-signature": h.signature},
            "body": body
        },
        "client": {"ip": "203.0.113.7", "country": "DE", "device_type": "mobile"},
        "user_id": 42
    })
}

macro_rules! app {
    ($rt:expr) => {
        test::init_service(App::new().configure(rampart::app::configure($rt.clone()))).await
    };
}

/// API tokens of the test runtime: `ci` (author) and `lead` (admin).
const AUTHOR: &str = "Bearer test-author-token-0001";
const LEAD: &str = "Bearer test-approver-token-01";

/// Uploads a rule set as `ci`, stages it in shadow, and has `lead` approve it: it is then stable.
async fn publish(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    files: Value,
) -> String {
    let call = |path: &str, auth: &str, body: Value| {
        test::TestRequest::post()
            .uri(path)
            .insert_header(("authorization", auth.to_string()))
            .set_payload(body.to_string())
            .to_request()
    };
    let resp = test::call_service(
        app,
        call("/admin/v1/rulesets", AUTHOR, json!({ "files": files })),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    let body: Value = test::read_body_json(resp).await;
    let version = body["version"].as_str().unwrap().to_string();
    let resp = test::call_service(
        app,
        call(
            "/admin/v1/rollout",
            AUTHOR,
            json!({ "version": version, "stage": "shadow" }),
        ),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 200);
    let resp = test::call_service(
        app,
        call(
            "/admin/v1/rollout/approve",
            LEAD,
            json!({ "version": version }),
        ),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 200);
    version
}

async fn post(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    path: &str,
    body: impl Into<Vec<u8>>,
) -> (u16, Value) {
    let req = test::TestRequest::post()
        .uri(path)
        .insert_header(("content-type", "application/json"))
        .set_payload(body.into())
        .to_request();
    let resp = test::call_service(app, req).await;
    let status = resp.status().as_u16();
    let bytes = test::read_body(resp).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[actix_web::test]
async fn allow_then_replay_with_the_contract_fields() {
    let rt = runtime("replay", "");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    let body = signed("coupon-claim-00001", now, r#"{"coupon":"SPRING"}"#).to_string();
    let (s, d) = post(&app, "/v1/decide", body.clone()).await;
    assert_eq!(s, 200);
    assert_eq!(d["action"], "allow");
    assert_eq!(d["code"], "OK");
    assert_eq!(d["status"], 200);
    for k in [
        "decision_id",
        "tier",
        "rule",
        "reasons",
        "retry_after_ms",
        "ruleset",
        "shadow",
        "latency_us",
    ] {
        assert!(d.get(k).is_some(), "missing {k} in {d}");
    }
    assert!(d["ruleset"]["version"].is_string() && d["ruleset"]["arm"].is_string());
    let (s, d) = post(&app, "/v1/decide", body).await;
    assert_eq!(s, 200);
    assert_eq!(d["action"], "deny");
    assert_eq!(d["code"], "REPLAY_DUPLICATE");
    assert_eq!(d["status"], 409);
    assert_eq!(d["tier"], "replay");
}

#[actix_web::test]
async fn skew_reports_server_time_and_skew() {
    let rt = runtime("skew", "");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("skewed-request-001", now - 60_000, "").to_string(),
    )
    .await;
    assert_eq!(d["code"], "TIMESTAMP_SKEW");
    assert_eq!(d["status"], 401);
    let skew = d["skew_ms"].as_i64().unwrap();
    assert!((-61_000..=-59_000).contains(&skew), "{d}");
    assert!(d["server_time_ms"].as_i64().unwrap() >= now);
    assert_eq!(d["reasons"][0]["skew_ms"], d["skew_ms"]);
    assert!(d["reasons"][0]["server_time_ms"].is_i64());
}

#[actix_web::test]
async fn bad_input_gets_a_4xx_envelope_never_a_5xx() {
    let rt = runtime("bad", "");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    let mut deep = String::new();
    for _ in 0..300 {
        deep.push('[');
    }
    for _ in 0..300 {
        deep.push(']');
    }
    let mut bad_hash = signed("bad-hash-000000001", now, "");
    bad_hash["request"]["body"] = Value::Null;
    bad_hash["request"]["body_sha256"] = json!("not-hex");
    let mut bad_ip = signed("bad-ip-00000000001", now, "");
    bad_ip["client"]["ip"] = json!("999.1.1.1");
    let mut header_type = signed("header-type-000001", now, "");
    header_type["request"]["headers"]["x-nonce"] = json!(5);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{\"app\":".to_vec(), 400, "MALFORMED_JSON"),
        (b"not json at all".to_vec(), 400, "MALFORMED_JSON"),
        (b"".to_vec(), 400, "MALFORMED_JSON"),
        (b"{}".to_vec(), 400, "INVALID_FIELD"),
        (b"{\"app\":5}".to_vec(), 400, "INVALID_FIELD"),
        (b"[]".to_vec(), 400, "INVALID_FIELD"),
        (b" [\"shop\"]".to_vec(), 400, "INVALID_FIELD"),
        (b"{\"app\":\"nope\"}".to_vec(), 404, "UNKNOWN_APP"),
        (b"{\"app\":\"\"}".to_vec(), 400, "INVALID_FIELD"),
        (header_type.to_string().into_bytes(), 400, "INVALID_FIELD"),
        (vec![b'{', 0xff, 0xfe, b'}'], 400, "MALFORMED_JSON"),
        (
            b"{\"app\":\"shop\",\"user_id\":\"\xff\xfe\"}".to_vec(),
            400,
            "MALFORMED_JSON",
        ),
        (
            format!("{{\"app\":\"shop\",\"params\":{deep}}}").into_bytes(),
            400,
            "JSON_TOO_DEEP",
        ),
        (vec![b' '; 70 * 1024], 413, "BODY_TOO_LARGE"),
        (bad_hash.to_string().into_bytes(), 400, "INVALID_FIELD"),
        (bad_ip.to_string().into_bytes(), 400, "INVALID_FIELD"),
    ];
    for (body, status, code) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        let (s, d) = post(&app, "/v1/decide", body).await;
        assert_eq!(s, status, "{shown}: {d}");
        assert_eq!(d["error"]["code"], code, "{shown}: {d}");
        assert!(d["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // Unknown routes and methods get the envelope too.
    let resp = test::call_service(
        &app,
        test::TestRequest::get().uri("/v2/nothing").to_request(),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 404);
    for (method, uri) in [
        ("GET", "/v1/decide"),
        ("POST", "/healthz"),
        ("DELETE", "/metrics"),
        ("POST", "/v1/time"),
    ] {
        let req = test::TestRequest::default()
            .method(method.parse().unwrap())
            .uri(uri)
            .to_request();
        let resp = test::call_service(&app, req).await;
        assert_eq!(resp.status().as_u16(), 405, "{method} {uri}");
    }
}

#[actix_web::test]
async fn bad_nonce_is_a_decision_and_does_not_leak_into_replay_codes() {
    let rt = runtime("nonce", "");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    for nonce in [
        "short",
        "has space in it 0123",
        &"x".repeat(65),
        "ünïcode-0123456789",
    ] {
        let (s, d) = post(&app, "/v1/decide", signed(nonce, now, "").to_string()).await;
        assert_eq!(s, 200);
        assert_eq!(d["code"], "NONCE_INVALID", "{nonce}");
        assert_eq!(d["status"], 400);
    }
    let mut unsigned = signed("unsigned-request-01", now, "");
    unsigned["request"]["headers"] = json!({});
    let (_, d) = post(&app, "/v1/decide", unsigned.to_string()).await;
    assert_eq!(d["code"], "SIGNATURE_MISSING");
    let mut forged = signed("forged-request-0001", now, "{}");
    forged["request"]["body"] = json!("{\"amount\":1000000}");
    let (_, d) = post(&app, "/v1/decide", forged.to_string()).await;
    assert_eq!(d["code"], "SIGNATURE_INVALID");
    // The forged attempt did not consume the nonce.
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("forged-request-0001", now, "{}").to_string(),
    )
    .await;
    assert_eq!(d["code"], "OK");
}

#[actix_web::test]
async fn batch_answers_in_order_with_per_item_errors() {
    let rt = runtime("batch", "[server]\nmax_batch_items = 4\n");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    let a = signed("batch-item-0000001", now, "");
    let other = signed("batch-item-0000002", now, r#"{"coupon":"B"}"#);
    let batch = json!([a, a, {"app": 7}, other]);
    let (s, d) = post(&app, "/v1/decide/batch", batch.to_string()).await;
    assert_eq!(s, 200);
    let items = d.as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0]["code"], "OK");
    assert_eq!(items[1]["code"], "REPLAY_DUPLICATE");
    assert_eq!(items[2]["error"]["code"], "INVALID_FIELD");
    assert_eq!(items[3]["code"], "OK");
    let five = json!([{}, {}, {}, {}, {}]);
    let (s, d) = post(&app, "/v1/decide/batch", five.to_string()).await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (413, Some("BATCH_TOO_LARGE"))
    );
    let (s, d) = post(&app, "/v1/decide/batch", "{\"app\":\"shop\"}").await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (400, Some("INVALID_FIELD"))
    );
}

#[actix_web::test]
async fn time_health_ready_metrics_recent_and_log() {
    let rt = runtime("ops", "");
    let app = app!(rt);
    let get = |uri: &str| test::TestRequest::get().uri(uri).to_request();

    let resp = test::call_service(&app, get("/readyz")).await;
    assert_eq!(
        resp.status().as_u16(),
        503,
        "not ready before background work starts"
    );
    rt.start_background();
    let resp = test::call_service(&app, get("/readyz")).await;
    assert_eq!(resp.status().as_u16(), 200);
    let resp = test::call_service(&app, get("/healthz")).await;
    assert_eq!(resp.status().as_u16(), 200);

    let before = rampart::clock::now_ms();
    let t: Value = test::call_and_read_body_json(&app, get("/v1/time")).await;
    let server = t["server_time_ms"].as_i64().unwrap();
    assert!(server >= before && server <= rampart::clock::now_ms());

    let now = rampart::clock::now_ms();
    let r = signed("ops-request-000001", now, "");
    post(&app, "/v1/decide", r.to_string()).await;
    post(&app, "/v1/decide", r.to_string()).await;

    let text = String::from_utf8(
        test::call_and_read_body(&app, get("/metrics"))
            .await
            .to_vec(),
    )
    .unwrap();
    for needle in [
        "rampart_decisions_total{action=\"allow\",code=\"OK\",step=\"final\"} 1",
        "rampart_decisions_total{action=\"deny\",code=\"REPLAY_DUPLICATE\",step=\"nonce\"} 1",
        "rampart_step_rejections_total{step=\"nonce\"} 1",
        "rampart_decision_latency_seconds_bucket",
        "rampart_nonce_filter_fill_ratio{mode=\"bloom\"}",
        "rampart_nonce_filter_estimated_fp{mode=\"bloom\"}",
        "rampart_nonce_filter_overloaded{mode=\"bloom\"} 0",
        "rampart_tier_evaluations_total{tier=\"edge\"} 2",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }

    let local = test::TestRequest::get()
        .uri("/admin/v1/decisions/recent?limit=10")
        .insert_header(("authorization", AUTHOR))
        .to_request();
    rt.log.flush();
    let recent: Value = test::call_and_read_body_json(&app, local).await;
    let ds = recent["decisions"].as_array().unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[0]["code"], "REPLAY_DUPLICATE", "newest first");
    assert_eq!(ds[1]["user"], "42");
    let anonymous = test::TestRequest::get()
        .uri("/admin/v1/decisions/recent")
        .to_request();
    assert_eq!(
        test::call_service(&app, anonymous).await.status().as_u16(),
        401
    );

    // Every decision is in the local log.
    rt.shutdown();
    let dir = &rt.config.raw.decision_log.dir;
    let rows: usize = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("decisions-")
        })
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .lines()
                .count()
        })
        .sum();
    assert_eq!(rows, 2);
}

#[actix_web::test]
async fn rule_set_upload_validates_swaps_and_reports_located_errors() {
    let rt = runtime("rules", "");
    let app = app!(rt);
    let local = |req: test::TestRequest| req.insert_header(("authorization", AUTHOR));
    let upload = |files: Value| {
        local(test::TestRequest::post().uri("/admin/v1/rulesets"))
            .set_payload(json!({ "files": files }).to_string())
            .to_request()
    };
    let meta = "//! name: {n}\n//! priority: 10\n//! owner: secops\n//! description: d\n";
    let good = json!({
        "edge/block.rhai": format!("{}if req.ip == \"203.0.113.7\" {{ deny(\"blocked\") }}", meta.replace("{n}", "block")),
        "business/shadow.rhai": format!("//! mode: shadow\n{}review(\"would review\")", meta.replace("{n}", "watch")),
    });
    let version = publish(&app, good.clone()).await;
    // The same content again is the same version, not a new one.
    let resp = test::call_service(&app, upload(good)).await;
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = test::read_body_json(resp).await;
    assert_eq!(body["version"], version.as_str());
    assert_eq!(body["meta"]["rules"], 2);
    assert_eq!(body["created"], false);

    // A broken set: every problem located, the live set unchanged.
    let broken = json!({
        "edge/block.rhai": format!("{}if req.ip == {{ deny(\"x\") }}", meta.replace("{n}", "block")),
        "gateway/x.rhai": format!("{}nuke(req.ip)", meta.replace("{n}", "x")),
    });
    let resp = test::call_service(&app, upload(broken)).await;
    assert_eq!(resp.status().as_u16(), 422);
    let body: Value = test::read_body_json(resp).await;
    assert_eq!(body["error"]["code"], "RULESET_INVALID");
    let details = body["error"]["details"].as_array().unwrap();
    assert!(
        details
            .iter()
            .any(|d| d["file"] == "gateway/x.rhai" && d["line"] == 5 && d["column"] == 1),
        "{body}"
    );
    assert!(
        details.iter().any(|d| d["file"] == "edge/block.rhai"),
        "{body}"
    );
    let current: Value = test::call_and_read_body_json(
        &app,
        local(test::TestRequest::get().uri("/admin/v1/rulesets/current")).to_request(),
    )
    .await;
    assert_eq!(current["version"], version.as_str());
    assert_eq!(current["rules"].as_array().unwrap().len(), 2);

    // Decisions carry the version, the shadow rule's would-be action, and the enforced rule.
    let now = rampart::clock::now_ms();
    let mut ok = signed("rules-request-0001", now, "");
    ok["client"]["ip"] = json!("198.51.100.1");
    let (_, d) = post(&app, "/v1/decide", ok.to_string()).await;
    assert_eq!(d["code"], "OK");
    assert_eq!(d["ruleset"]["version"], version.as_str());
    assert_eq!(d["shadow"][0]["rule"], "watch");
    assert_eq!(d["shadow"][0]["action"], "review");
    let mut blocked = signed("rules-request-0002", now, "");
    blocked["client"]["ip"] = json!("203.0.113.7");
    let (_, d) = post(&app, "/v1/decide", blocked.to_string()).await;
    assert_eq!(
        (d["code"].as_str(), d["tier"].as_str(), d["rule"].as_str()),
        (Some("RULE_DENY"), Some("edge"), Some("block"))
    );
    assert_eq!(d["status"], 403);

    // Not without credentials, nor with a wrong token.
    let anonymous = test::TestRequest::get()
        .uri("/admin/v1/rulesets/current")
        .to_request();
    assert_eq!(
        test::call_service(&app, anonymous).await.status().as_u16(),
        401
    );
    let wrong = test::TestRequest::get()
        .uri("/admin/v1/rulesets/current")
        .insert_header(("authorization", "Bearer not-a-token-at-all"))
        .to_request();
    let resp = test::call_service(&app, wrong).await;
    assert_eq!(resp.status().as_u16(), 401);
    let body: Value = test::read_body_json(resp).await;
    assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
}

#[actix_web::test]
async fn outcomes_feed_the_routes_circuit_breaker() {
    let rt = runtime("breaker", "");
    let app = app!(rt);
    let meta = "//! name: pay-breaker\n//! priority: 10\n//! owner: payments\n//! description: d\n//! routes: /api/coupon/claim\n";
    let rule = format!(
        "{meta}if circuit_open(req, #{{min_requests: 5, error_ratio: 0.5, open_ms: 60000}}) {{ deny(\"CIRCUIT_OPEN\", \"payment backend failing\") }}"
    );
    publish(
        &app,
        json!({"files": {"gateway/breaker.rhai": rule}})["files"].clone(),
    )
    .await;
    let now = rampart::clock::now_ms();
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("breaker-request-001", now, "{\"n\":1}").to_string(),
    )
    .await;
    assert_eq!(
        d["code"], "OK",
        "closed: the first request creates the breaker and passes"
    );
    let outcomes: Vec<Value> = (0..6)
        .map(|i| json!({"app": "shop", "route": "/api/coupon/claim", "status": if i < 4 { 503 } else { 200 }, "latency_ms": 20}))
        .collect();
    let report = Value::Array(outcomes).to_string();
    // Unsigned, or signed with another key, a report feeds nothing: anyone who reached the port
    // could open a breaker (or keep one closed) before.
    let (s, d) = post(&app, "/v1/outcome", report.clone()).await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (401, Some("SIGNATURE_MISSING")),
        "{d}"
    );
    let (s, d) = report_signed(&app, b"not-the-secret", "outcome-report-forged", &report).await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (401, Some("SIGNATURE_INVALID")),
        "{d}"
    );
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("breaker-request-002", now, "{\"n\":2}").to_string(),
    )
    .await;
    assert_eq!(d["code"], "OK", "refused reports opened nothing: {d}");
    let (s, d) = report_signed(&app, b"s3cret", "outcome-report-0001", &report).await;
    assert_eq!((s, d["recorded"].as_u64()), (200, Some(6)), "{d}");
    // The same signed report again is a replay: it counts once.
    let (s, d) = report_signed(&app, b"s3cret", "outcome-report-0001", &report).await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (409, Some("REPLAY_DUPLICATE")),
        "{d}"
    );
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("breaker-request-003", now, "{\"n\":3}").to_string(),
    )
    .await;
    assert_eq!(
        (d["code"].as_str(), d["status"].as_u64(), d["tier"].as_str()),
        (Some("CIRCUIT_OPEN"), Some(503), Some("gateway"))
    );
    // One signed report covers one app.
    let two = json!([{"app": "shop", "route": "/x", "status": 200, "latency_ms": 1},
                     {"app": "other", "route": "/x", "status": 200, "latency_ms": 1}]);
    let (s, d) = report_signed(&app, b"s3cret", "outcome-report-0002", &two.to_string()).await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (400, Some("INVALID_FIELD")),
        "{d}"
    );
    // Bad outcomes are refused with the envelope.
    let (s, d) = report_signed(
        &app,
        b"s3cret",
        "outcome-report-0003",
        &json!({"app": "nope", "route": "/x", "status": 200, "latency_ms": 1}).to_string(),
    )
    .await;
    assert_eq!((s, d["error"]["code"].as_str()), (404, Some("UNKNOWN_APP")));
    let (s, d) = report_signed(
        &app,
        b"s3cret",
        "outcome-report-0004",
        &json!({"app": "shop", "route": "/x", "status": 42, "latency_ms": 1}).to_string(),
    )
    .await;
    assert_eq!(
        (s, d["error"]["code"].as_str()),
        (400, Some("INVALID_FIELD"))
    );
    let (s, _) = post(&app, "/v1/outcome", "{\"app\":").await;
    assert_eq!(s, 400);

    // `outcome_auth = "none"` keeps contract v1's unauthenticated reports, for a private port.
    let open = runtime("breaker-open", "[server]\noutcome_auth = \"none\"\n");
    let app = app!(open);
    let (s, d) = post(&app, "/v1/outcome", report).await;
    assert_eq!((s, d["recorded"].as_u64()), (200, Some(6)), "{d}");
}

/// `POST /v1/outcome` with `report` as its body, signed for app `shop` with `secret`.
async fn report_signed(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    secret: &[u8],
    nonce: &str,
    report: &str,
) -> (u16, Value) {
    let h = sign(
        secret,
        &ToSign {
            app: "shop",
            method: "POST",
            path: "/v1/outcome",
            query: "",
            body: report.as_bytes(),
            timestamp_ms: rampart::clock::now_ms(),
            nonce,
        },
    );
    let req = test::TestRequest::post()
        .uri("/v1/outcome")
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", h.timestamp))
        .insert_header(("x-nonce", h.nonce))
        .insert_header(("x-signature", h.signature))
        .set_payload(report.to_string())
        .to_request();
    let resp = test::call_service(app, req).await;
    let status = resp.status().as_u16();
    let bytes = test::read_body(resp).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A forward-auth call as nginx `auth_request` makes it: no body, the original request in headers.
fn authz_call(nonce: &str, uri: &str, content_sha: Option<&str>) -> test::TestRequest {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let body: &[u8] = b"";
    let h = sign(
        b"s3cret",
        &ToSign {
            app: "shop",
            method: "POST",
            path,
            query,
            body,
            timestamp_ms: rampart::clock::now_ms(),
            nonce,
        },
    );
    let mut r = test::TestRequest::get()
        .uri("/v1/authz")
        .insert_header(("X-App", "shop"))
        .insert_header(("X-Original-Method", "POST"))
        .insert_header(("X-Original-URI", uri))
        // A forged left-most entry, the client as the proxy saw it, the proxy.
        .insert_header(("X-Forwarded-For", "6.6.6.6, 198.51.100.44, 10.0.0.1"))
        .insert_header(("User-Agent", "Mozilla/5.0 forward-auth test"))
        .insert_header(("x-timestamp", h.timestamp))
        .insert_header(("x-nonce", h.nonce))
        .insert_header(("x-signature", h.signature));
    if let Some(s) = content_sha {
        r = r.insert_header(("x-content-sha256", s));
    }
    r
}

/// A forward-auth call for a request with a body: proxies do not forward bodies, so the client
/// declares its hash in `X-Content-SHA256` (signed), and the user comes in `X-User-Id`.
fn authz_with_body(nonce: &str, uri: &str, body: &[u8], user: &str) -> test::TestRequest {
    let h = sign(
        b"s3cret",
        &ToSign {
            app: "shop",
            method: "POST",
            path: uri,
            query: "",
            body,
            timestamp_ms: rampart::clock::now_ms(),
            nonce,
        },
    );
    test::TestRequest::get()
        .uri("/v1/authz")
        .insert_header(("X-App", "shop"))
        .insert_header(("X-Original-Method", "POST"))
        .insert_header(("X-Original-URI", uri))
        .insert_header(("X-User-Id", user))
        .insert_header(("x-timestamp", h.timestamp))
        .insert_header(("x-nonce", h.nonce))
        .insert_header(("x-signature", h.signature))
        .insert_header(("x-content-sha256", h.body_sha256))
}

/// Threat 12 through a proxy: a retry with a fresh nonce and the same body is one submission,
/// judged by the declared body hash (the only view of the body forward-auth has).
#[actix_web::test]
async fn forward_auth_retries_of_one_body_are_one_submission() {
    let rt = runtime("authz-fp", "[rules]\ndefaults = false\n");
    let app = app!(rt);
    let order = br#"{"idempotency_key":"ord-9","amount":5}"#;
    let code = |r: &actix_web::dev::ServiceResponse| {
        (
            r.status().as_u16(),
            hdr(r.headers(), "x-rampart-code").to_string(),
        )
    };
    let first = authz_with_body("authz-fp-00000001", "/api/pay", order, "u-7").to_request();
    let first = test::call_service(&app, first).await;
    assert_eq!(code(&first), (200, "OK".into()));
    let retry = authz_with_body("authz-fp-00000002", "/api/pay", order, "u-7").to_request();
    let retry = test::call_service(&app, retry).await;
    assert_eq!(code(&retry), (409, "DUPLICATE_SUBMISSION".into()));
    // Another operation (another body), or another user, is a new submission.
    let other = br#"{"idempotency_key":"ord-10","amount":5}"#;
    let r = authz_with_body("authz-fp-00000003", "/api/pay", other, "u-7").to_request();
    assert_eq!(code(&test::call_service(&app, r).await), (200, "OK".into()));
    let r = authz_with_body("authz-fp-00000004", "/api/pay", order, "u-8").to_request();
    assert_eq!(code(&test::call_service(&app, r).await), (200, "OK".into()));
}

#[actix_web::test]
async fn forward_auth_allows_then_stops_the_replay_with_its_status_and_headers() {
    let rt = runtime(
        "authz",
        "[rules]\ndefaults = false\n[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
    );
    let app = app!(rt);
    let first = test::call_service(
        &app,
        authz_call("authz-nonce-00000001", "/api/pay?b=2&a=1", None).to_request(),
    )
    .await;
    assert_eq!(first.status(), 200);
    assert_eq!(hdr(first.headers(), "x-rampart-decision"), "allow");
    assert_eq!(hdr(first.headers(), "x-rampart-code"), "OK");
    let replay = test::call_service(
        &app,
        authz_call("authz-nonce-00000001", "/api/pay?b=2&a=1", None).to_request(),
    )
    .await;
    assert_eq!(replay.status(), 409);
    assert_eq!(hdr(replay.headers(), "x-rampart-decision"), "deny");
    assert_eq!(hdr(replay.headers(), "x-rampart-code"), "REPLAY_DUPLICATE");
    assert_eq!(hdr(replay.headers(), "x-rampart-status"), "409");
    // The client IP is the right-most X-Forwarded-For entry that is no trusted proxy
    // (`trusted_proxies = ["10.0.0.0/8"]`); the row records it.
    rt.log.flush();
    let recent = rt.log.recent(2);
    assert_eq!(recent[0].ip.as_deref(), Some("198.51.100.44"));
    assert_eq!(recent[0].route, "/api/pay");

    // A declared body hash that the signature did not cover: the signature fails (401).
    let tampered = test::call_service(
        &app,
        authz_call("authz-nonce-00000002", "/api/pay", Some(&"ab".repeat(32))).to_request(),
    )
    .await;
    assert_eq!(tampered.status(), 401);
    assert_eq!(
        hdr(tampered.headers(), "x-rampart-code"),
        "SIGNATURE_INVALID"
    );

    // No anti-replay headers at all.
    let bare = test::TestRequest::get()
        .uri("/v1/authz")
        .insert_header(("X-App", "shop"))
        .insert_header(("X-Original-URI", "/"))
        .to_request();
    let bare = test::call_service(&app, bare).await;
    assert_eq!(bare.status(), 401);
    assert_eq!(hdr(bare.headers(), "x-rampart-code"), "SIGNATURE_MISSING");

    // Bad forward-auth calls: a 4xx envelope with its code in the header too, never a 5xx.
    for (req, code) in [
        (
            test::TestRequest::get().uri("/v1/authz").to_request(),
            "INVALID_FIELD",
        ),
        (
            test::TestRequest::get()
                .uri("/v1/authz")
                .insert_header(("X-App", "nope"))
                .to_request(),
            "UNKNOWN_APP",
        ),
        (
            test::TestRequest::get()
                .uri("/v1/authz")
                .insert_header(("X-App", "shop"))
                .insert_header(("X-Original-URI", "no-slash"))
                .to_request(),
            "INVALID_FIELD",
        ),
    ] {
        let r = test::call_service(&app, req).await;
        assert!(r.status().is_client_error(), "{code}: {}", r.status());
        assert_eq!(hdr(r.headers(), "x-rampart-code"), code);
    }
}

#[actix_web::test]
async fn forward_auth_as_envoy_sends_it_reads_the_original_path_after_the_prefix() {
    let rt = runtime(
        "authz-envoy",
        "[rules]\ndefaults = false\n[server]\nproxy_headers = \"envoy\"\n",
    );
    let app = app!(rt);
    let h = sign(
        b"s3cret",
        &ToSign {
            app: "shop",
            method: "DELETE",
            path: "/api/cart/7",
            query: "x=1",
            body: b"",
            timestamp_ms: rampart::clock::now_ms(),
            nonce: "envoy-nonce-0000001",
        },
    );
    let req = || {
        test::TestRequest::delete()
            .uri("/v1/authz/api/cart/7?x=1")
            .insert_header(("X-App", "shop"))
            .insert_header(("x-timestamp", h.timestamp.clone()))
            .insert_header(("x-nonce", h.nonce.clone()))
            .insert_header(("x-signature", h.signature.clone()))
            .to_request()
    };
    assert_eq!(test::call_service(&app, req()).await.status(), 200);
    assert_eq!(test::call_service(&app, req()).await.status(), 409);
}

fn hdr<'a>(h: &'a actix_web::http::header::HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Route paths registered in a source file: `resource("…")`, `get_only("…")`, `r("…")`.
fn registered(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!(
        "{}/src/{file}",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let mut out = Vec::new();
    for pat in ["resource(\"", "get_only(\"", " r(\"", "(r(\""] {
        for (i, _) in text.match_indices(pat) {
            let rest = &text[i + pat.len()..];
            let path = &rest[..rest.find('"').unwrap()];
            if path.starts_with('/') {
                // actix's `{tail:.*}` is OpenAPI's `{tail}`.
                out.push(path.replace(":.*}", "}"));
            }
        }
    }
    out
}

#[actix_web::test]
async fn the_openapi_document_covers_every_route_and_every_operation_is_served() {
    let rt = runtime("openapi", "");
    let app = app!(rt);
    let resp = test::call_service(
        &app,
        test::TestRequest::get().uri("/openapi.json").to_request(),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 200);
    let doc: Value = test::read_body_json(resp).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    // Generated from the types: the decide body and answer carry contract v1's fields.
    let schemas = &doc["components"]["schemas"];
    for f in ["app", "request", "client", "user_id", "params"] {
        assert!(
            schemas["DecideRequest"]["properties"][f].is_object(),
            "DecideRequest.{f}"
        );
    }
    for f in [
        "decision_id",
        "action",
        "code",
        "status",
        "tier",
        "rule",
        "reasons",
        "retry_after_ms",
        "ruleset",
        "shadow",
        "latency_us",
    ] {
        assert!(
            schemas["DecisionOut"]["properties"][f].is_object(),
            "DecisionOut.{f}"
        );
    }
    assert!(schemas["Code"].to_string().contains("REPLAY_DUPLICATE"));
    // Every registered route is documented, and nothing else is.
    let mut routes: Vec<String> = registered("http/mod.rs")
        .into_iter()
        .chain(registered("admin/mod.rs"))
        .collect();
    routes.sort();
    routes.dedup();
    let mut documented: Vec<String> = paths.keys().cloned().collect();
    documented.sort();
    assert_eq!(routes, documented, "routes vs /openapi.json paths");
    // Every documented operation is served (401 for admin routes without credentials is fine).
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let uri = path
                .replace("{version}", "stable")
                .replace("{app}", "shop")
                .replace("{id}", "1")
                .replace("{tail}", "x/y");
            let req = test::TestRequest::default()
                .method(method.to_ascii_uppercase().parse().unwrap())
                .uri(&uri)
                .to_request();
            let resp = test::call_service(&app, req).await;
            let st = resp.status().as_u16();
            assert!(st != 404 && st != 405, "{method} {uri} answered {st}");
        }
    }
}

/// The local log's lines hold the recorded request as an object (not JSON text escaped into a
/// string), except one nested too deep for the line to be read back; the ring of recent
/// decisions still shows it as a string, and the explorer reads both forms.
#[actix_web::test]
async fn local_log_holds_the_recorded_request_as_an_object_and_reads_the_older_string() {
    let rt = runtime("recobj", "");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    let body = r#"{"coupon":"A \"quoted\" \\ one","n":[1,2]}"#;
    let (_, d) = post(
        &app,
        "/v1/decide",
        signed("recobj-request-001", now, body).to_string(),
    )
    .await;
    assert_eq!(d["code"], "OK", "{d}");
    let dir = rt.config.raw.decision_log.dir.clone();
    // A row as an older build wrote it: the recorded request as JSON text in a string.
    let old_request = json!({"query": "old=1", "headers": {"user-agent": "old \"agent\""}, "body": null, "device_id": null, "params": null});
    let old = json!({
        "time_ms": now - 1, "decision_id": "old-row-1", "app": "shop", "method": "GET",
        "route": "/old", "action": "allow", "code": "OK", "status": 200, "reasons": [],
        "shadow": [], "ruleset_version": "none", "arm": "stable", "latency_us": 5,
        "degraded": false, "instance": "i", "score": 0,
        "request": old_request.to_string(),
    });
    std::fs::write(
        dir.join("decisions-0000000000001-000001.jsonl"),
        format!("{old}\n"),
    )
    .unwrap();

    let get = |uri: &str| {
        test::TestRequest::get()
            .uri(uri)
            .insert_header(("authorization", AUTHOR))
            .to_request()
    };
    rt.log.flush();
    let recent: Value =
        test::call_and_read_body_json(&app, get("/admin/v1/decisions/recent")).await;
    let text = recent["decisions"][0]["request"]
        .as_str()
        .expect("a string in the ring");
    let in_ring: Value = serde_json::from_str(text).unwrap();
    assert_eq!(in_ring["body"], body);

    let found: Value =
        test::call_and_read_body_json(&app, get("/admin/v1/decisions?limit=10")).await;
    let rows = found["decisions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{found}");
    assert_eq!(rows[0]["decision_id"], d["decision_id"]);
    assert_eq!(rows[0]["request"], in_ring);
    assert_eq!(rows[0]["request"]["query"], "c=SPRING&lang=en");
    assert!(rows[0]["request"]["headers"].get("x-signature").is_none());
    assert_eq!(rows[1]["decision_id"], "old-row-1");
    assert_eq!(rows[1]["request"], old_request);

    // Params nested 126 deep, as deep as the decide body's parser takes them: the line, two
    // levels deeper, would be past the parser's limit and the row lost to the queries; it is
    // kept as a string, and found. (The explorer's answer is deeper still, past serde_json's
    // default limit: it is read here as text.)
    let deep_text = format!("{}1{}", "[".repeat(126), "]".repeat(126));
    let mut deep = signed("recobj-request-002", now, "");
    deep["params"] = serde_json::from_str(&deep_text).unwrap();
    let (_, dd) = post(&app, "/v1/decide", deep.to_string()).await;
    assert_eq!(dd["code"], "OK", "{dd}");
    let found = test::call_and_read_body(&app, get("/admin/v1/decisions?limit=10")).await;
    let found = String::from_utf8(found.to_vec()).unwrap();
    assert_eq!(found.matches("\"decision_id\":").count(), 3, "{found}");
    assert!(
        found.contains(dd["decision_id"].as_str().unwrap()),
        "{found}"
    );
    assert!(
        found.contains(&format!("\"params\":{deep_text}")),
        "{found}"
    );

    rt.shutdown();
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("decisions-") && name != "decisions-0000000000001-000001.jsonl" {
            lines.extend(
                std::fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .map(str::to_string),
            );
        }
    }
    assert_eq!(lines.len(), 2);
    let row: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(row["decision_id"], d["decision_id"]);
    assert_eq!(
        row["request"], in_ring,
        "an object in the file: {}",
        lines[0]
    );
    // The deep one: a string in the file.
    let row: Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(row["decision_id"], dd["decision_id"]);
    let text = row["request"].as_str().expect("a string in the file");
    assert!(text.contains(&deep_text), "{text}");
}

/// The same anti-replay header twice, differing only in case (or repeated through a proxy), is
/// refused with `400 DUPLICATE_HEADER` before anything is judged: which copy "wins" must never
/// depend on a map's order.
#[actix_web::test]
async fn duplicate_anti_replay_headers_are_refused_with_a_4xx() {
    let rt = runtime("dup-headers", "[rules]\ndefaults = false\n");
    let app = app!(rt);
    let now = rampart::clock::now_ms();
    for name in ["x-nonce", "x-timestamp", "x-signature"] {
        let mut r = signed("dup-header-nonce-0001", now, "{}");
        let upper: String = name
            .split('-')
            .map(|p| p[..1].to_ascii_uppercase() + &p[1..])
            .collect::<Vec<_>>()
            .join("-");
        let copy = r["request"]["headers"][name].clone();
        r["request"]["headers"][upper.as_str()] = copy;
        let (s, d) = post(&app, "/v1/decide", r.to_string()).await;
        assert_eq!(s, 400, "{name}: {d}");
        assert_eq!(d["error"]["code"], "DUPLICATE_HEADER", "{name}: {d}");
    }
    // The genuine request (one copy of each) is untouched by the refusals: its nonce is fresh.
    let (s, d) = post(
        &app,
        "/v1/decide",
        signed("dup-header-nonce-0001", now, "{}").to_string(),
    )
    .await;
    assert_eq!((s, d["code"].as_str()), (200, Some("OK")), "{d}");

    // Through forward-auth: a header repeated (HTTP names are case-insensitive).
    let r = authz_call("dup-header-nonce-0002", "/api/pay", None)
        .append_header(("X-Nonce", "another-nonce-000001"))
        .to_request();
    let r = test::call_service(&app, r).await;
    assert_eq!(r.status(), 400);
    assert_eq!(hdr(r.headers(), "x-rampart-code"), "DUPLICATE_HEADER");
}

/// A runtime from a whole configuration (`{dir}` is replaced by a fresh directory).
fn runtime_from(tag: &str, config: &str) -> Arc<Runtime> {
    let dir = temp_dir(tag);
    let path = dir.join("rampart.toml");
    std::fs::write(&path, config.replace("{dir}", &dir.display().to_string())).unwrap();
    let v = Config::load_with_env(Some(&path), std::iter::empty())
        .unwrap()
        .validate()
        .unwrap();
    Runtime::build(v).unwrap()
}

fn signed_for(app: &str, secret: &[u8], nonce: &str, ts: i64) -> Value {
    let h = sign(
        secret,
        &ToSign {
            app,
            method: "GET",
            path: "/api/items",
            query: "",
            body: b"",
            timestamp_ms: ts,
            nonce,
        },
    );
    json!({
        "app": app,
        "request": {
            "method": "GET", "path": "/api/items",
            "headers": {"x-timestamp": h.timestamp, "x-nonce": h.nonce, "x-signature": h.signature}
        }
    })
}

/// One app's signed flood spends its own nonce capacity only: with a Bloom filter it raises its
/// own false-positive rate, never another app's; with exact nonces it fills its own store, and
/// the other app's requests still pass. (The quiet app is sized for its own 200 quick requests:
/// sized at 100/s like the loud one, those alone overloaded its filter now and then.)
#[actix_web::test]
async fn one_apps_flood_cannot_starve_another_app() {
    for mode in ["bloom", "exact"] {
        let rt = runtime_from(
            &format!("per-app-{mode}"),
            &format!(
                "[[apps]]\nid = \"loud\"\nsecret = \"loud-secret\"\nwindow_ms = 5000\n\
                 [[apps]]\nid = \"quiet\"\nsecret = \"quiet-secret\"\nwindow_ms = 5000\nexpected_rps = 5000\n\
                 [state]\nnonce_mode = \"{mode}\"\nexpected_rps = 100\nexact_max_entries = 300\n\
                 [rules]\ndefaults = false\n\
                 [decision_log]\ndir = \"{{dir}}/log\"\n[admin]\nstate_dir = \"{{dir}}/control\"\n"
            ),
        );
        let app = app!(rt);
        let now = rampart::clock::now_ms();
        // The loud app sends 30 times what the filter (or the store) is sized for.
        let mut loud = std::collections::HashMap::<String, usize>::new();
        for i in 0..3000 {
            let r = signed_for("loud", b"loud-secret", &format!("loud-flood-{i:010}"), now);
            let (_, d) = post(&app, "/v1/decide", r.to_string()).await;
            *loud
                .entry(d["code"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        if mode == "exact" {
            assert!(
                loud.get("STORE_UNAVAILABLE").is_some_and(|n| *n > 2000),
                "{loud:?}"
            );
        } else {
            // A saturated filter answers "seen" to fresh nonces: the loud app's own false kills.
            assert!(
                loud.get("REPLAY_DUPLICATE").is_some_and(|n| *n > 100),
                "{loud:?}"
            );
        }
        // The quiet app's fresh requests all pass.
        for i in 0..200 {
            let r = signed_for(
                "quiet",
                b"quiet-secret",
                &format!("quiet-fresh-{i:09}"),
                now,
            );
            let (s, d) = post(&app, "/v1/decide", r.to_string()).await;
            assert_eq!(
                (s, d["code"].as_str()),
                (200, Some("OK")),
                "{mode} {i}: {d}"
            );
        }
    }
}

/// Browser pages behind forward-auth (`accept_unsigned`): an unsigned page load that a rule
/// challenges is answered with the challenge page when it asks for HTML (what Traefik and Envoy
/// show the browser), with the JSON decision otherwise; `/v1/authz-page` (what nginx shows) takes
/// nothing from its headers that does not fit its alphabet; an app without the setting still
/// refuses unsigned requests.
#[actix_web::test]
async fn a_refused_browser_page_load_gets_the_page_and_an_api_call_the_json() {
    let dir = temp_dir("authz-page");
    std::fs::create_dir_all(dir.join("rules/edge")).unwrap();
    std::fs::write(
        dir.join("rules/edge/members.rhai"),
        "//! name: members-pow\n//! priority: 10\n//! owner: t\n//! description: t\n\
         if req.path.starts_with(\"/members/\") && !req.cleared { challenge(\"members\", #{difficulty: 9}) }\n",
    )
    .unwrap();
    let path = dir.join("rampart.toml");
    std::fs::write(
        &path,
        format!(
            "[[apps]]\nid = \"web\"\nsecret = \"s3cret\"\naccept_unsigned = true\n\
             [[apps]]\nid = \"shop\"\nsecret = \"s3cret\"\n\
             [rules]\ndir = \"{d}/rules\"\n[decision_log]\ndir = \"{d}/log\"\n\
             [admin]\nstate_dir = \"{d}/control\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let v = Config::load_with_env(Some(&path), std::iter::empty())
        .unwrap()
        .validate()
        .unwrap();
    let rt = Runtime::build(v).unwrap();
    let app = app!(rt);
    let load_of = |app_id: &str, uri: &str, accept: &str| {
        test::TestRequest::get()
            .uri("/v1/authz")
            .insert_header(("X-App", app_id.to_string()))
            .insert_header(("X-Original-Method", "GET"))
            .insert_header(("X-Original-URI", uri.to_string()))
            .insert_header(("Accept", accept.to_string()))
            .to_request()
    };
    let load = |app_id: &str, accept: &str| load_of(app_id, "/members/home", accept);
    let html = "text/html,application/xhtml+xml,*/*;q=0.8";

    // A browser's page load: the challenge page, with the decision's headers.
    let r = test::call_service(&app, load("web", html)).await;
    assert_eq!(r.status(), 401);
    let h = r.headers().clone();
    assert_eq!(hdr(&h, "x-rampart-decision"), "challenge");
    assert_eq!(hdr(&h, "x-rampart-code"), "RULE_CHALLENGE");
    assert!(hdr(&h, "content-type").starts_with("text/html"));
    assert!(hdr(&h, "content-security-policy").contains("script-src 'sha256-"));
    assert_eq!(hdr(&h, "cache-control"), "no-store");
    let token = hdr(&h, "x-rampart-challenge").to_string();
    assert!(token.starts_with("p1.web."), "{token}");
    let body = String::from_utf8(test::read_body(r).await.to_vec()).unwrap();
    assert!(body.contains(&format!("\"token\":\"{token}\"")), "{body}");
    assert!(body.contains("\"difficulty\":9"));
    assert!(body.contains("solveInWorker"), "the solver is inlined");

    // An API client's call: the JSON decision, as before.
    let r = test::call_service(&app, load("web", "application/json")).await;
    assert_eq!(r.status(), 401);
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["challenge"]["kind"], "pow");
    assert_eq!(v["key_id"], Value::Null);

    // A page no rule refuses: allowed unsigned, naming no key.
    let r = test::call_service(&app, load_of("web", "/home", html)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(hdr(r.headers(), "x-rampart-key-id"), "");
    // An app that does not accept unsigned requests: refused, with the refusal page.
    let r = test::call_service(&app, load_of("shop", "/home", html)).await;
    assert_eq!(r.status(), 401);
    assert_eq!(hdr(r.headers(), "x-rampart-code"), "SIGNATURE_MISSING");
    let body = String::from_utf8(test::read_body(r).await.to_vec()).unwrap();
    assert!(body.contains("401 SIGNATURE_MISSING"), "{body}");
    assert!(!body.contains("rampart-challenge"));

    // The page nginx asks for, from what it copied of the answer.
    let page = |headers: &[(&str, &str)]| {
        let mut t = test::TestRequest::get().uri("/v1/authz-page");
        for (k, v) in headers {
            t = t.insert_header((k.to_string(), v.to_string()));
        }
        t.to_request()
    };
    let r = test::call_service(
        &app,
        page(&[
            ("X-Rampart-Status", "401"),
            ("X-Rampart-Code", "RULE_CHALLENGE"),
            ("X-Rampart-Challenge", &token),
        ]),
    )
    .await;
    assert_eq!(r.status(), 401);
    let body = String::from_utf8(test::read_body(r).await.to_vec()).unwrap();
    assert!(body.contains(&token));
    let r = test::call_service(
        &app,
        page(&[
            ("X-Rampart-Status", "409"),
            ("X-Rampart-Code", "REPLAY_DUPLICATE"),
            ("X-Rampart-Decision-Id", "0190-ab"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 409);
    assert_eq!(hdr(r.headers(), "x-rampart-code"), "REPLAY_DUPLICATE");
    let body = String::from_utf8(test::read_body(r).await.to_vec()).unwrap();
    assert!(body.contains("409 REPLAY_DUPLICATE") && body.contains("0190-ab"));
    // Whatever a client could put there: no markup, no 2xx, no challenge from a non-token.
    let r = test::call_service(
        &app,
        page(&[
            ("X-Rampart-Status", "200"),
            ("X-Rampart-Code", "<script>alert(1)</script>"),
            ("X-Rampart-Decision-Id", "\"><img src=x>"),
            ("X-Rampart-Challenge", "p1.web.<script>"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(hdr(r.headers(), "x-rampart-code"), "");
    let body = String::from_utf8(test::read_body(r).await.to_vec()).unwrap();
    assert!(!body.contains("<script"), "{body}");
    assert!(
        !body.contains("<img") && !body.contains("rampart-challenge"),
        "{body}"
    );
    let r = test::call_service(
        &app,
        test::TestRequest::post().uri("/v1/authz-page").to_request(),
    )
    .await;
    assert_eq!(r.status(), 405);
}

/// An operator looks up a subject and resets its reputation (local state): the gateway's refusals
/// have given the client's address, user and device points; the view shows them with the list
/// entries that cover the address and the last decisions; the reset is audited, needs an author,
/// and the next refusal starts from nothing.
#[actix_web::test]
async fn a_subjects_reputation_is_shown_and_reset_by_an_author() {
    let dir = temp_dir("subjects-rules");
    std::fs::create_dir_all(dir.join("gateway")).unwrap();
    std::fs::write(
        dir.join("gateway/no-coupons.rhai"),
        "//! name: no-coupons\n//! priority: 10\n//! owner: t\n//! description: t\n//! routes: /api/coupon/claim\n\
         deny(\"coupons are closed\")\n",
    )
    .unwrap();
    // Rate limits, a counter and a distinct set keyed by the address and the user (the limits slow
    // enough, one request per 1,000 s, that what the view says does not depend on how long the
    // test takes).
    std::fs::write(
        dir.join("gateway/limits.rhai"),
        "//! name: limits\n//! priority: 5\n//! owner: t\n//! description: t\n\
         if !rate_limit(\"ip:\" + req.ip, 0.001, 5) { deny(\"RATE_LIMITED\", \"ip\") }\n\
         if !rate_limit(\"user:\" + req.user, 0.001, 3) { deny(\"RATE_LIMITED\", \"user\") }\n\
         if count(\"orders:\" + req.user, 600000) > 100 { deny(\"orders\") }\n\
         if distinct(\"accounts:\" + req.ip, req.user, 3600000) > 100 { deny(\"accounts\") }\n\
         claim(\"promo:\" + req.ip, req.user, 100);\n",
    )
    .unwrap();
    let rt = runtime(
        "subjects",
        &format!("[rules]\ndir = \"{}\"\n", dir.display()),
    );
    let app = app!(rt);
    let send = |req: test::TestRequest| req.to_request();
    let get = |path: &str, auth: &str| {
        send(
            test::TestRequest::get()
                .uri(path)
                .insert_header(("authorization", auth.to_string())),
        )
    };
    let now = rampart::clock::now_ms();
    for i in 0..3 {
        // Different bodies: the same one would be a duplicate submission before the rules.
        let mut body = signed(
            &format!("subject-nonce-{i:08}"),
            now,
            &format!("{{\"coupon\":\"X{i}\"}}"),
        );
        body["client"]["ip"] = json!("203.0.113.50");
        body["user_id"] = json!("u-subject");
        let (st, v) = post(&app, "/v1/decide", body.to_string()).await;
        assert_eq!((st, v["code"].as_str()), (200, Some("RULE_DENY")), "{v}");
    }
    // A block-list entry covering the address.
    let r = test::call_service(
        &app,
        send(
            test::TestRequest::post()
                .uri("/admin/v1/lists")
                .insert_header(("authorization", AUTHOR))
                .set_payload(
                    json!({"list": "block", "kind": "ip", "value": "203.0.113.0/24", "note": "t"})
                        .to_string(),
                ),
        ),
    )
    .await;
    assert_eq!(r.status(), 201);

    let r = test::call_service(&app, get("/admin/v1/subjects/ip/203.0.113.50", AUTHOR)).await;
    assert_eq!(r.status(), 200);
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["reputation"]["points"], 30, "three gateway denials: {v}");
    assert_eq!(v["lists"][0]["value"], "203.0.113.0/24");
    assert_eq!(v["decisions"].as_array().map(Vec::len), Some(3), "{v}");
    // Three requests spent three of the address's five; the user's limit has none left.
    let limit = &v["limits"][0];
    assert_eq!(v["limits"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(
        (
            &limit["rule"],
            &limit["key"],
            &limit["burst"],
            &limit["remaining"]
        ),
        (
            &json!("limits"),
            &json!("ip:203.0.113.50"),
            &json!(5),
            &json!(2)
        ),
        "{v}"
    );
    assert_eq!(
        (
            &v["distinct"][0]["key"],
            &v["distinct"][0]["count"],
            &v["counters"]
        ),
        (&json!("accounts:203.0.113.50"), &json!(1), &json!([])),
        "one account seen from the address: {v}"
    );
    let r = test::call_service(&app, get("/admin/v1/subjects/user/u-subject", AUTHOR)).await;
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["reputation"]["points"], 30);
    // One claim held (the two later calls were duplicates).
    assert_eq!(
        v["claims"],
        json!([{ "pool": "promo:203.0.113.50" }]),
        "{v}"
    );
    assert_eq!(v["lists"], json!([]));
    let limit = &v["limits"][0];
    assert_eq!(
        (&limit["key"], &limit["remaining"]),
        (&json!("user:u-subject"), &json!(0)),
        "{v}"
    );
    assert!(limit["retry_after_ms"].as_u64().unwrap() > 900_000, "{v}");
    assert_eq!(
        (
            &v["counters"][0]["key"],
            &v["counters"][0]["count"],
            &v["counters"][0]["window_ms"]
        ),
        (&json!("orders:u-subject"), &json!(3), &json!(600_000)),
        "{v}"
    );

    // The hottest keys: three calls each, the user's limit refused none of them.
    let r = test::call_service(&app, get("/admin/v1/hot-keys?limit=10", AUTHOR)).await;
    assert_eq!(r.status(), 200);
    let v: Value = test::read_body_json(r).await;
    let hot: Vec<(String, String, u64, u64)> = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kind"].as_str().unwrap().to_string(),
                k["key"].as_str().unwrap().to_string(),
                k["calls"].as_u64().unwrap(),
                k["refused"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [
        ("rate_limit", "ip:203.0.113.50", 3, 0),
        ("rate_limit", "user:u-subject", 3, 0),
        ("count", "orders:u-subject", 3, 0),
    ] {
        let want = (want.0.to_string(), want.1.to_string(), want.2, want.3);
        assert!(hot.contains(&want), "{want:?} in {hot:?}");
    }

    // Bad input: a 4xx with its code.
    for (path, code) in [
        ("/admin/v1/subjects/planet/earth", "INVALID_FIELD"),
        ("/admin/v1/subjects/ip/not-an-address", "INVALID_FIELD"),
        ("/admin/v1/hot-keys?limit=0", "INVALID_FIELD"),
        ("/admin/v1/hot-keys?limit=many", "INVALID_FIELD"),
    ] {
        let r = test::call_service(&app, get(path, AUTHOR)).await;
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = test::read_body_json(r).await;
        assert_eq!(v["error"]["code"], code);
    }
    let r = test::call_service(&app, get("/admin/v1/subjects/ip/203.0.113.50", "")).await;
    assert_eq!(r.status(), 401);

    // The reset: audited, and the address starts from nothing; the user keeps its points.
    let reset = |path: &str| {
        send(
            test::TestRequest::post()
                .uri(path)
                .insert_header(("authorization", AUTHOR)),
        )
    };
    let r = test::call_service(
        &app,
        reset("/admin/v1/subjects/ip/203.0.113.50/reputation/reset"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["reputation"]["before"], 30);
    let r = test::call_service(&app, get("/admin/v1/subjects/ip/203.0.113.50", AUTHOR)).await;
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["reputation"]["points"], 0);
    let r = test::call_service(&app, get("/admin/v1/subjects/user/u-subject", AUTHOR)).await;
    let v: Value = test::read_body_json(r).await;
    assert_eq!(v["reputation"]["points"], 30);
    let r = test::call_service(&app, get("/admin/v1/audit", AUTHOR)).await;
    let v: Value = test::read_body_json(r).await;
    let entries = v["entries"].as_array().cloned().unwrap_or_default();
    assert!(
        entries
            .iter()
            .any(|e| e["action"] == "subject.reputation.reset"
                && e["target"] == "ip:203.0.113.50"
                && e["before"] == "30"),
        "{v}"
    );
}
