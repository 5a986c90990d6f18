//! Signing keys and rotation end to end, against `rampart serve` processes: configured keyrings
//! (each active key passes and is named in the answer, the decision log and the metrics; keys
//! outside their validity, unknown `x-key-id`s and a fifth signature entry are refused), the same
//! through forward-auth, and keys added and retired through the admin API applied by a second
//! running instance within `[admin] poll_ms`, without a restart, whether the instances share the
//! control store as local files or through Redis; four-eyes approval when configured; no secret in
//! any answer, listing or audit entry.

mod support;
#[path = "support/users.rs"]
mod users;

use std::path::Path;
use std::time::{Duration, Instant};

use rampart_core::replay::sign::{sign_many, ToSign};
use serde_json::{json, Value};
use support::{agent, now_ms, temp_dir, Engine, RedisServer};
use users::basic;

const POLL_MS: u64 = 200;

/// root and ada are admins, vera a viewer; password = name + "-pw".
fn users() -> String {
    users::admin_users(&[("root", "admin"), ("ada", "admin"), ("vera", "viewer")])
}

/// App `shop`: the plain secret (key `default`, retiring in an hour), `k2` (valid now), `k3`
/// (valid from tomorrow) and `k1` (expired an hour ago). App `pay`: one plain secret.
fn config(extra: &str) -> String {
    let now = now_ms();
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"old-secret-0001\"\nwindow_ms = 60000\n\
         keys = [{{ id = \"k2\", secret = \"new-secret-0002\", not_before_ms = {} }}, \
                 {{ id = \"k3\", secret_env = \"RAMPART_TEST_K3\", not_before_ms = {} }}, \
                 {{ id = \"k1\", secret = \"gone-secret-001\", not_after_ms = {} }}]\n\
         [[apps]]\nid = \"pay\"\nsecret = \"pay-secret-0001\"\n\
         [rules]\ndefaults = false\n\
         [admin]\ncookie_secure = false\npoll_ms = {POLL_MS}\n{extra}\n{}",
        now - 60_000,
        now + 86_400_000,
        now - 3_600_000,
        users()
    )
}

fn start(dir: &Path, name: &str, cfg: &str, control: Option<&Path>) -> Engine {
    let mut env = vec![("RAMPART_TEST_K3", "next-secret-003".to_string())];
    if let Some(c) = control {
        env.push(("RAMPART_ADMIN_STATE_DIR", c.display().to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Engine::start_with_env(dir, name, cfg, &env)
}

/// The anti-replay headers of a GET `/api/items` signed with each of `secrets`, naming `key_id`.
fn headers(app: &str, secrets: &[&str], key_id: Option<&str>, nonce: &str) -> Value {
    let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let h = sign_many(
        &secrets,
        &ToSign {
            app,
            method: "GET",
            path: "/api/items",
            query: "",
            body: b"",
            timestamp_ms: now_ms(),
            nonce,
        },
    );
    let mut v = json!({
        "x-timestamp": h.timestamp,
        "x-nonce": h.nonce,
        "x-signature": h.signature,
    });
    if let Some(k) = key_id {
        v["x-key-id"] = k.into();
    }
    v
}

fn fresh(tag: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    support::nonce(
        &format!("key-{tag}"),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    )
}

/// `/v1/decide` for app `app`: the answer.
fn decide_app(e: &Engine, app: &str, secrets: &[&str], key_id: Option<&str>) -> Value {
    let body = json!({
        "app": app,
        "request": { "method": "GET", "path": "/api/items",
                     "headers": headers(app, secrets, key_id, &fresh(app)) },
    });
    let (st, v) = e.decide(&body);
    assert_eq!(st, 200, "{v}");
    v
}

fn decide(e: &Engine, secrets: &[&str], key_id: Option<&str>) -> Value {
    decide_app(e, "shop", secrets, key_id)
}

#[track_caller]
fn passes(v: &Value, key: &str) {
    assert_eq!(
        (v["code"].as_str(), v["key_id"].as_str()),
        (Some("OK"), Some(key)),
        "{v}"
    );
}

#[track_caller]
fn refused(v: &Value, reason: &str) {
    assert_eq!(
        (v["code"].as_str(), v["status"].as_u64()),
        (Some("SIGNATURE_INVALID"), Some(401)),
        "{v}"
    );
    let msg = v["reasons"][0]["message"].as_str().unwrap_or("");
    assert!(msg.contains(reason), "{reason:?} not in {v}");
    assert!(v.get("key_id").is_none(), "{v}");
}

fn call(
    e: &Engine,
    method: &str,
    path: &str,
    who: &str,
    body: Option<&Value>,
) -> (u16, Value, String) {
    let url = format!("{}{path}", e.base);
    let a = agent();
    let r = match method {
        "GET" => a.get(&url).header("authorization", basic(who)).call(),
        "DELETE" => a.delete(&url).header("authorization", basic(who)).call(),
        _ => a
            .post(&url)
            .header("authorization", basic(who))
            .send(body.map(|b| b.to_string()).unwrap_or_default()),
    };
    let mut r = r.unwrap();
    let st = r.status().as_u16();
    let cache = r
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = r.body_mut().read_to_string().unwrap();
    (
        st,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        cache,
    )
}

fn metric(e: &Engine, series: &str) -> f64 {
    let text = e.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

/// Waits until `e` accepts `secret` for `shop` (named `key`); returns how long it took.
fn accepted_within(e: &Engine, secret: &str, key: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let v = decide(e, &[secret], None);
        if v["code"] == "OK" {
            assert_eq!(v["key_id"], key, "{v}");
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "not accepted within {limit:?}: {v}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `e` refuses `secret` for `shop`.
fn refused_within(e: &Engine, secret: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let v = decide(e, &[secret], None);
        if v["code"] == "SIGNATURE_INVALID" {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "still accepted after {limit:?}: {v}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn configured_keys_pass_while_valid_and_every_refusal_says_why() {
    let d = temp_dir("keys-config");
    let e = start(&d, "a", &config(""), None);
    // Each active key passes, unnamed and named, and the answer names it.
    passes(&decide(&e, &["old-secret-0001"], None), "default");
    passes(
        &decide(&e, &["old-secret-0001"], Some("default")),
        "default",
    );
    passes(&decide(&e, &["new-secret-0002"], None), "k2");
    passes(&decide(&e, &["new-secret-0002"], Some("k2")), "k2");
    // Before not_before_ms and after not_after_ms: refused (named: with the reason).
    refused(
        &decide(&e, &["next-secret-003"], None),
        "signature does not match the canonical string",
    );
    refused(
        &decide(&e, &["next-secret-003"], Some("k3")),
        "key \"k3\" (named by x-key-id) is not valid before",
    );
    refused(&decide(&e, &["gone-secret-001"], None), "does not match");
    refused(
        &decide(&e, &["gone-secret-001"], Some("k1")),
        "key \"k1\" (named by x-key-id) expired at",
    );
    // Two signatures of which one matches pass; the newer key is credited when both do.
    passes(
        &decide(&e, &["wrong-secret-00", "old-secret-0001"], None),
        "default",
    );
    passes(
        &decide(&e, &["old-secret-0001", "new-secret-0002"], None),
        "k2",
    );
    // Four entries are read; a fifth is refused.
    passes(
        &decide(
            &e,
            &[
                "a-wrong-secret",
                "b-wrong-secret",
                "c-wrong-secret",
                "new-secret-0002",
            ],
            None,
        ),
        "k2",
    );
    refused(
        &decide(
            &e,
            &[
                "a-wrong-secret",
                "b-wrong-secret",
                "c-wrong-secret",
                "d-wrong-secret",
                "new-secret-0002",
            ],
            None,
        ),
        "x-signature carries 5 entries; at most 4",
    );
    // x-key-id naming an unknown key, or another app's key.
    refused(
        &decide(&e, &["new-secret-0002"], Some("k9")),
        "x-key-id \"k9\" names no key of this app",
    );
    refused(
        &decide_app(&e, "pay", &["new-secret-0002"], Some("k2")),
        "x-key-id \"k2\" names no key of this app",
    );
    passes(
        &decide_app(&e, "pay", &["pay-secret-0001"], None),
        "default",
    );
    // The metrics name the key that matched.
    let uses = |key: &str| {
        metric(
            &e,
            &format!("rampart_signature_key_uses_total{{app=\"shop\",key=\"{key}\"}}"),
        )
    };
    assert_eq!(uses("default"), 3.0);
    assert_eq!(uses("k2"), 4.0);
    assert_eq!(uses("k3"), 0.0);
    // The batch endpoint names keys per item.
    let items = json!([
        { "app": "shop", "request": { "path": "/api/items", "headers": headers("shop", &["new-secret-0002"], None, &fresh("b1")) } },
        { "app": "shop", "request": { "path": "/api/items", "headers": headers("shop", &["nope-nope-nope"], None, &fresh("b2")) } },
    ]);
    let (st, v) = support::post(&format!("{}/v1/decide/batch", e.base), &items);
    assert_eq!(st, 200);
    assert_eq!(v[0]["key_id"], "k2");
    assert_eq!(v[1]["code"], "SIGNATURE_INVALID");

    // The decision log names the key: the explorer filters and the stats break down by it.
    let t0 = Instant::now();
    let rows = loop {
        let (st, v) = e_get(&e, "/admin/v1/decisions?from=0&app=shop&key_id=k2");
        assert_eq!(st, 200, "{v}");
        let rows = v["decisions"].as_array().cloned().unwrap_or_default();
        if rows.len() >= 5 || t0.elapsed() > Duration::from_secs(10) {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert!(rows
        .iter()
        .all(|r| r["key_id"] == "k2" && r["code"] == "OK"));
    let (_, refusals) = e_get(
        &e,
        "/admin/v1/decisions?from=0&app=shop&code=SIGNATURE_INVALID",
    );
    assert!(refusals["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["key_id"] == ""));
    let (st, v) = e_get(&e, "/admin/v1/stats?from=0&app=shop&by=key_id");
    assert_eq!(st, 200, "{v}");
    let by: std::collections::HashMap<&str, u64> = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["key"].as_str().unwrap(), b["n"].as_u64().unwrap()))
        .collect();
    assert_eq!((by["k2"], by["default"]), (5, 3), "{v}");
}

/// GET as root.
fn e_get(e: &Engine, path: &str) -> (u16, Value) {
    let (st, v, _) = call(e, "GET", path, "root", None);
    (st, v)
}

#[test]
fn forward_auth_reads_the_key_headers_too() {
    let d = temp_dir("keys-authz");
    let e = start(&d, "a", &config(""), None);
    let check = |secrets: &[&str], key_id: Option<&str>, nonce: &str| {
        let h = headers("shop", secrets, key_id, nonce);
        let mut rq = agent()
            .get(&format!("{}/v1/authz", e.base))
            .header("x-app", "shop")
            .header("x-original-method", "GET")
            .header("x-original-uri", "/api/items");
        for (k, v) in h.as_object().unwrap() {
            rq = rq.header(k.as_str(), v.as_str().unwrap());
        }
        let r = rq.call().unwrap();
        let get = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        (
            r.status().as_u16(),
            get("x-rampart-code"),
            get("x-rampart-key-id"),
        )
    };
    assert_eq!(
        check(&["new-secret-0002"], Some("k2"), &fresh("authz-1")),
        (200, Some("OK".into()), Some("k2".into()))
    );
    assert_eq!(
        check(
            &["nope-nope-nope", "old-secret-0001"],
            None,
            &fresh("authz-2")
        ),
        (200, Some("OK".into()), Some("default".into()))
    );
    let five = ["a1", "a2", "a3", "a4", "new-secret-0002"];
    assert_eq!(
        check(&five, None, &fresh("authz-3")),
        (401, Some("SIGNATURE_INVALID".into()), None)
    );
    assert_eq!(
        check(&["new-secret-0002"], Some("k9"), &fresh("authz-4")),
        (401, Some("SIGNATURE_INVALID".into()), None)
    );
}

/// One instance adds a key and retires keys through the admin API; the other, running all the
/// while, applies each change within `poll_ms`.
fn rotation_across_instances(a: &Engine, b: &Engine, store: &str) {
    let limit = Duration::from_millis(POLL_MS * 3 + 500);
    // Only admins manage keys.
    for (method, path) in [
        ("GET", "/admin/v1/apps/shop/keys"),
        ("POST", "/admin/v1/apps/shop/keys"),
        ("DELETE", "/admin/v1/apps/shop/keys/k2"),
    ] {
        let (st, v, _) = call(a, method, path, "vera", Some(&json!({})));
        assert_eq!(st, 403, "{method} {path}: {v}");
    }
    let (st, v, _) = call(a, "GET", "/admin/v1/apps/nope/keys", "root", None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("UNKNOWN_APP"))
    );

    // Add a key with a generated secret: shown once, in this answer only.
    let (st, created, cache) = call(
        a,
        "POST",
        "/admin/v1/apps/shop/keys",
        "root",
        Some(&json!({ "id": "k4" })),
    );
    assert_eq!(st, 201, "{created}");
    assert_eq!(cache, "no-store");
    assert_eq!(created["state"], "active");
    let secret = created["secret"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 64, "{created}");
    let took = accepted_within(b, &secret, "k4", limit);
    eprintln!("{store}: a key added on a was accepted by b after {took:?}");
    passes(&decide(a, &[&secret], Some("k4")), "k4");

    // Never shown again: not in the listing, the audit log, the settings or the metrics.
    let (st, list, _) = call(b, "GET", "/admin/v1/apps/shop/keys", "root", None);
    assert_eq!(st, 200, "{list}");
    let ids: Vec<&str> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["default", "k2", "k3", "k1", "k4"], "{list}");
    let k4 = &list["keys"][4];
    assert_eq!(
        (
            k4["source"].as_str(),
            k4["state"].as_str(),
            k4["by"].as_str()
        ),
        (Some("api"), Some("active"), Some("root"))
    );
    assert!(k4["uses"].as_u64().unwrap() >= 1, "{list}");
    assert!(k4["last_used_ms"].as_i64().is_some(), "{list}");
    assert_eq!(list["keys"][3]["state"], "expired");
    assert_eq!(list["keys"][2]["state"], "not_yet_valid");
    let (_, audit, _) = call(a, "GET", "/admin/v1/audit?limit=100", "root", None);
    let (_, settings, _) = call(a, "GET", "/admin/v1/settings", "root", None);
    for text in [
        list.to_string(),
        audit.to_string(),
        settings.to_string(),
        a.metrics(),
    ] {
        for s in [
            secret.as_str(),
            "old-secret-0001",
            "new-secret-0002",
            "next-secret-003",
        ] {
            assert!(!text.contains(s), "a secret leaked: {text}");
        }
    }
    assert!(audit.to_string().contains("key.add"), "{audit}");

    // A key given by the caller is accepted and not echoed; ids are unique; bad input is refused.
    let (st, v, _) = call(
        a,
        "POST",
        "/admin/v1/apps/shop/keys",
        "ada",
        Some(
            &json!({ "id": "k5", "secret": "a-secret-from-a-vault", "not_before_ms": now_ms() - 1000 }),
        ),
    );
    assert_eq!(st, 201, "{v}");
    assert!(v.get("secret").is_none(), "{v}");
    accepted_within(b, "a-secret-from-a-vault", "k5", limit);
    for (body, status, code) in [
        (json!({ "id": "k4" }), 409, "KEY_EXISTS"),
        (json!({ "id": "k2" }), 409, "KEY_EXISTS"),
        (json!({ "id": "bad id" }), 400, "INVALID_FIELD"),
        (
            json!({ "id": "k6", "secret": "short" }),
            400,
            "INVALID_FIELD",
        ),
        (
            json!({ "id": "k6", "not_after_ms": 5 }),
            400,
            "INVALID_FIELD",
        ),
        (
            json!({ "id": "k6", "not_before_ms": 9_999_999_999_999i64, "not_after_ms": 9_999_999_999_998i64 }),
            400,
            "INVALID_FIELD",
        ),
        (json!({ "id": "k6", "colour": "red" }), 400, "INVALID_FIELD"),
    ] {
        let (st, v, _) = call(a, "POST", "/admin/v1/apps/shop/keys", "root", Some(&body));
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
    }

    // The old default key leaked: retire it. Refused everywhere within poll_ms, without a
    // restart; the reason names it only when x-key-id does.
    let (st, v, _) = call(
        a,
        "DELETE",
        "/admin/v1/apps/shop/keys/default",
        "root",
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert!(v.get("warning").is_none(), "{v}");
    let took = refused_within(b, "old-secret-0001", limit);
    eprintln!("{store}: a key retired on a was refused by b after {took:?}");
    for e in [a, b] {
        let v = decide(e, &["old-secret-0001"], None);
        refused(&v, "signature does not match the canonical string");
        assert!(!v.to_string().contains("default"), "{v}");
        refused(
            &decide(e, &["old-secret-0001"], Some("default")),
            "key \"default\" (named by x-key-id) was retired",
        );
        passes(&decide(e, &["new-secret-0002"], None), "k2");
    }
    // Retired ids stay retired and are never reused.
    let (st, v, _) = call(
        a,
        "DELETE",
        "/admin/v1/apps/shop/keys/default",
        "root",
        None,
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("KEY_RETIRED"))
    );
    let (st, v, _) = call(
        a,
        "POST",
        "/admin/v1/apps/shop/keys",
        "root",
        Some(&json!({ "id": "default" })),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("KEY_RETIRED"))
    );
    let (st, v, _) = call(a, "DELETE", "/admin/v1/apps/shop/keys/k7", "root", None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("KEY_NOT_FOUND"))
    );

    // A key added through the API is retired the same way, here by query parameter.
    let (st, v, _) = call(b, "DELETE", "/admin/v1/apps/shop/keys?id=k4", "ada", None);
    assert_eq!(st, 200, "{v}");
    refused_within(a, &secret, limit);
    refused(
        &decide(a, &[&secret], Some("k4")),
        "key \"k4\" (named by x-key-id) was retired",
    );
    let (_, list, _) = call(a, "GET", "/admin/v1/apps/shop/keys", "root", None);
    let retired: Vec<&str> = list["retired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(retired, ["default", "k4"], "{list}");
    // Retiring the last valid keys leaves the app refusing everything, and says so.
    call(a, "DELETE", "/admin/v1/apps/shop/keys/k5", "root", None);
    let (st, v, _) = call(a, "DELETE", "/admin/v1/apps/shop/keys/k2", "root", None);
    assert_eq!(st, 200);
    assert!(
        v["warning"].as_str().unwrap().contains("every request"),
        "{v}"
    );
    refused_within(b, "new-secret-0002", limit);
    // The other app is untouched.
    passes(&decide_app(b, "pay", &["pay-secret-0001"], None), "default");
}

#[test]
fn keys_added_and_retired_apply_on_a_second_instance_sharing_local_files() {
    let d = temp_dir("keys-files");
    let control = d.join("shared-control");
    let cfg = config("");
    let a = start(&d, "a", &cfg, Some(&control));
    let b = start(&d, "b", &cfg, Some(&control));
    rotation_across_instances(&a, &b, "files");
    // The state file holds secrets: owner-only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(control.join("state.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "state.json is {mode:o}");
    }
    // A restart keeps the keys and the retirements.
    drop(b);
    let b = start(&d, "b2", &cfg, Some(&control));
    refused(
        &decide(&b, &["old-secret-0001"], Some("default")),
        "was retired",
    );
}

#[test]
fn keys_added_and_retired_apply_on_a_second_instance_sharing_redis() {
    let redis = RedisServer::start();
    let d = temp_dir("keys-redis");
    let cfg = config(&format!(
        "[state]\nbackend = \"redis\"\nredis_url = \"{}\"\n",
        redis.url()
    ));
    let a = start(&d, "a", &cfg, None);
    let b = start(&d, "b", &cfg, None);
    rotation_across_instances(&a, &b, "redis");
    // A key added through Redis reaches a third instance started later.
    let (st, v, _) = call(
        &a,
        "POST",
        "/admin/v1/apps/shop/keys",
        "root",
        Some(&json!({ "id": "k8" })),
    );
    assert_eq!(st, 201, "{v}");
    let c = start(&d, "c", &cfg, None);
    passes(
        &decide(&c, &[v["secret"].as_str().unwrap()], Some("k8")),
        "k8",
    );
}

#[test]
fn with_key_approval_a_second_admin_must_approve_a_new_key() {
    let d = temp_dir("keys-approval");
    let e = start(&d, "a", &config("key_approval = true"), None);
    let (st, created, _) = call(
        &e,
        "POST",
        "/admin/v1/apps/shop/keys",
        "root",
        Some(&json!({ "id": "k6" })),
    );
    assert_eq!(
        (st, created["state"].as_str()),
        (201, Some("pending")),
        "{created}"
    );
    let secret = created["secret"].as_str().unwrap().to_string();
    // Pending: refused, and listed as pending.
    refused(
        &decide(&e, &[&secret], Some("k6")),
        "x-key-id \"k6\" names no key",
    );
    let (_, list, _) = call(&e, "GET", "/admin/v1/apps/shop/keys", "root", None);
    assert!(list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["id"] == "k6" && k["state"] == "pending"));
    // Not by the admin who added it.
    let (st, v, _) = call(
        &e,
        "POST",
        "/admin/v1/apps/shop/keys/k6/approve",
        "root",
        None,
    );
    assert_eq!((st, v["error"]["code"].as_str()), (403, Some("FOUR_EYES")));
    let (st, v, _) = call(
        &e,
        "POST",
        "/admin/v1/apps/shop/keys/k6/approve",
        "vera",
        None,
    );
    assert_eq!(st, 403, "{v}");
    let (st, v, _) = call(
        &e,
        "POST",
        "/admin/v1/apps/shop/keys/k6/approve",
        "ada",
        None,
    );
    assert_eq!(st, 200, "{v}");
    passes(&decide(&e, &[&secret], Some("k6")), "k6");
    let (st, v, _) = call(
        &e,
        "POST",
        "/admin/v1/apps/shop/keys/k6/approve",
        "ada",
        None,
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("NOT_PENDING"))
    );
    // Retiring does not wait for a second person.
    let (st, _, _) = call(&e, "DELETE", "/admin/v1/apps/shop/keys/k6", "root", None);
    assert_eq!(st, 200);
    refused(&decide(&e, &[&secret], Some("k6")), "was retired");
    let (_, audit, _) = call(&e, "GET", "/admin/v1/audit?limit=100", "root", None);
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["action"].as_str())
        .filter(|a| a.starts_with("key."))
        .collect();
    assert_eq!(actions, ["key.retire", "key.approve", "key.add"], "{audit}");
}
