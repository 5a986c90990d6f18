//! The rule lifecycle end to end against `rampart serve` processes: roles on every admin route,
//! four-eyes approval, canary assignment, automatic rollback with its audit entry, persistence
//! across a restart, block/allow lists (shared through a real Redis), sessions with CSRF, login
//! throttling and the regression endpoint.

mod support;
#[path = "support/users.rs"]
mod users;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{agent, now_ms, temp_dir, Call, Engine, RedisServer};
use users::basic;

const SECRET: &[u8] = b"admin-test-secret";

/// Users: vera (viewer), alice (author), bob (approver), root (admin); password = name + "-pw".
fn users() -> String {
    users::admin_users(&[
        ("vera", "viewer"),
        ("alice", "author"),
        ("bob", "approver"),
        ("carol", "approver"),
        ("root", "admin"),
    ])
}

fn rule(name: &str, body: &str) -> String {
    format!(
        "//! name: {name}\n//! priority: 10\n//! owner: secops\n//! description: test\n{body}\n"
    )
}

/// A rule directory with one harmless rule (the stable set at start).
fn rules_dir(dir: &Path) -> String {
    let r = dir.join("rules");
    std::fs::create_dir_all(r.join("edge")).unwrap();
    std::fs::write(r.join("edge/base.rhai"), rule("base", "()")).unwrap();
    format!("[rules]\ndir = \"{}\"\nreload = false\n", r.display())
}

fn config(dir: &Path, extra: &str) -> String {
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"admin-test-secret\"\nwindow_ms = 60000\n{}[admin]\ncookie_secure = false\npoll_ms = 100\n{extra}\n{}",
        rules_dir(dir),
        users()
    )
}

fn call(
    e: &Engine,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", e.base);
    let a = agent();
    let r = match method {
        "GET" => {
            let mut rq = a.get(&url);
            if let Some(h) = auth {
                rq = rq.header("authorization", h);
            }
            rq.call()
        }
        "DELETE" => {
            let mut rq = a.delete(&url);
            if let Some(h) = auth {
                rq = rq.header("authorization", h);
            }
            rq.call()
        }
        _ => {
            let mut rq = match method {
                "PUT" => a.put(&url),
                _ => a.post(&url),
            };
            if let Some(h) = auth {
                rq = rq.header("authorization", h);
            }
            rq.send(body.map(|b| b.to_string()).unwrap_or_default())
        }
    };
    let mut r = r.unwrap();
    let st = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (st, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn upload(e: &Engine, who: &str, files: Value) -> String {
    let (st, v) = call(
        e,
        "POST",
        "/admin/v1/rulesets",
        Some(&basic(who)),
        Some(&json!({ "files": files, "message": "test change" })),
    );
    assert!(st == 201 || st == 200, "{st} {v}");
    v["version"].as_str().unwrap().to_string()
}

fn stage(e: &Engine, who: &str, version: &str, stage: &str, percent: Option<f64>) -> (u16, Value) {
    let mut b = json!({ "version": version, "stage": stage });
    if let Some(p) = percent {
        b["percent"] = json!(p);
    }
    call(e, "POST", "/admin/v1/rollout", Some(&basic(who)), Some(&b))
}

fn signed(user: &str, ip: &str, nonce: String) -> Value {
    Call {
        app: "shop",
        secret: SECRET,
        path: "/api/items",
        body: String::new(),
        user,
        ip,
        device: "",
        params: json!({ "n": nonce }),
        nonce,
        ts_ms: now_ms(),
    }
    .json()
}

fn batch(e: &Engine, items: &[Value]) -> Vec<Value> {
    let (st, v) = support::post(&format!("{}/v1/decide/batch", e.base), &json!(items));
    assert_eq!(st, 200, "{v}");
    v.as_array().unwrap().clone()
}

#[test]
fn every_admin_route_refuses_roles_below_its_own_and_approval_takes_a_second_person() {
    let d = temp_dir("admin-roles");
    let e = Engine::start(&d, "roles", &config(&d, ""));
    let v = json!({"edge/x.rhai": rule("x", "()")});
    // (method, path, body, the lowest role that may call it)
    let routes: Vec<(&str, &str, Value, usize)> = vec![
        ("GET", "/admin/v1/session", Value::Null, 0),
        ("GET", "/admin/v1/decisions/recent", Value::Null, 0),
        ("GET", "/admin/v1/decisions", Value::Null, 0),
        ("GET", "/admin/v1/stats", Value::Null, 0),
        ("GET", "/admin/v1/rulesets", Value::Null, 0),
        ("GET", "/admin/v1/rulesets/current", Value::Null, 0),
        ("GET", "/admin/v1/rulesets/stable", Value::Null, 0),
        ("GET", "/admin/v1/rulesets/stable/diff", Value::Null, 0),
        ("GET", "/admin/v1/rollout", Value::Null, 0),
        ("GET", "/admin/v1/lists", Value::Null, 0),
        ("GET", "/admin/v1/audit", Value::Null, 0),
        ("GET", "/admin/v1/settings/log-level", Value::Null, 0),
        ("GET", "/admin/v1/settings", Value::Null, 0),
        ("POST", "/admin/v1/rulesets", json!({ "files": v }), 1),
        (
            "POST",
            "/admin/v1/rulesets/validate",
            json!({ "files": v }),
            1,
        ),
        (
            "POST",
            "/admin/v1/rulesets/stable/trace",
            json!({"sample": "no-such-sample"}),
            1,
        ),
        (
            "POST",
            "/admin/v1/rulesets/stable/regress",
            json!({"only_uploaded": true}),
            1,
        ),
        ("POST", "/admin/v1/rulesets/stable/activate", Value::Null, 1),
        (
            "POST",
            "/admin/v1/rollout",
            json!({"version": "stable", "stage": "shadow"}),
            1,
        ),
        ("POST", "/admin/v1/rollout/rollback", Value::Null, 1),
        (
            "POST",
            "/admin/v1/lists",
            json!({"list": "block", "kind": "user", "value": "u"}),
            1,
        ),
        ("DELETE", "/admin/v1/lists/999", Value::Null, 1),
        (
            "POST",
            "/admin/v1/rollout/approve",
            json!({"version": "stable"}),
            2,
        ),
        (
            "PUT",
            "/admin/v1/settings/log-level",
            json!({"level": "info"}),
            3,
        ),
    ];
    let people = ["vera", "alice", "bob", "root"];
    for (method, path, body, min) in &routes {
        let body = (!body.is_null()).then_some(body);
        let (st, v) = call(&e, method, path, None, body);
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (401, Some("UNAUTHENTICATED")),
            "{method} {path} anonymous"
        );
        for (i, who) in people.iter().enumerate() {
            let (st, v) = call(&e, method, path, Some(&basic(who)), body);
            if i < *min {
                assert_eq!(st, 403, "{method} {path} as {who}: {v}");
                assert_eq!(v["error"]["code"], "FORBIDDEN");
            } else {
                assert_ne!(
                    st, 403,
                    "{method} {path} as {who} must be allowed past auth: {v}"
                );
                assert_ne!(st, 401, "{method} {path} as {who}: {v}");
            }
        }
    }
    // A wrong password is refused, never let through.
    let (st, _) = call(
        &e,
        "GET",
        "/admin/v1/rollout",
        Some("Basic YWxpY2U6d3Jvbmc="),
        None,
    );
    assert_eq!(st, 401);

    // Four eyes: the author cannot approve (role), an approver cannot approve their own change.
    let mine = upload(
        &e,
        "alice",
        json!({"edge/x.rhai": rule("x", "if req.path == \"/x\" { deny(\"x\") }")}),
    );
    assert_eq!(stage(&e, "alice", &mine, "canary", Some(5.0)).0, 200);
    let (st, _) = call(
        &e,
        "POST",
        "/admin/v1/rollout/approve",
        Some(&basic("alice")),
        Some(&json!({"version": mine})),
    );
    assert_eq!(st, 403);
    let theirs = upload(&e, "bob", json!({"edge/y.rhai": rule("y", "()")}));
    let (st, v) = stage(&e, "bob", &theirs, "shadow", None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("CANDIDATE_IN_PROGRESS")),
        "{v}"
    );
    assert_eq!(
        call(
            &e,
            "POST",
            "/admin/v1/rollout/rollback",
            Some(&basic("alice")),
            Some(&json!({"reason": "swap"}))
        )
        .0,
        200
    );
    assert_eq!(stage(&e, "bob", &theirs, "shadow", None).0, 200);
    let (st, v) = call(
        &e,
        "POST",
        "/admin/v1/rollout/approve",
        Some(&basic("bob")),
        Some(&json!({"version": theirs})),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (403, Some("FOUR_EYES")),
        "{v}"
    );
    let (st, v) = call(
        &e,
        "POST",
        "/admin/v1/rollout/approve",
        Some(&basic("carol")),
        Some(&json!({"version": theirs})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stable"], theirs.as_str());
    let (_, cur) = call(
        &e,
        "GET",
        "/admin/v1/rulesets/current",
        Some(&basic("vera")),
        None,
    );
    assert_eq!(cur["version"], theirs.as_str());

    // Every change is attributed in the audit log.
    let (_, a) = call(
        &e,
        "GET",
        "/admin/v1/audit?action=rollout",
        Some(&basic("vera")),
        None,
    );
    let entries = a["entries"].as_array().unwrap();
    let approve = entries
        .iter()
        .find(|x| x["action"] == "rollout.approve")
        .unwrap();
    assert_eq!(approve["actor"], "carol");
    assert_eq!(approve["after"], theirs.as_str());
    assert!(approve["before"].is_string());
    assert!(entries
        .iter()
        .any(|x| x["action"] == "rollout.stage" && x["actor"] == "alice"));

    // Runtime log level: the admin may change it; a bad directive is refused.
    let (st, _) = call(
        &e,
        "PUT",
        "/admin/v1/settings/log-level",
        Some(&basic("root")),
        Some(&json!({"level": "debug"})),
    );
    assert_eq!(st, 200);
    let (_, l) = call(
        &e,
        "GET",
        "/admin/v1/settings/log-level",
        Some(&basic("vera")),
        None,
    );
    assert_eq!(l["level"], "debug");
    let (st, _) = call(
        &e,
        "PUT",
        "/admin/v1/settings/log-level",
        Some(&basic("root")),
        Some(&json!({"level": "=[bad"})),
    );
    assert_eq!(st, 400);
}

#[test]
fn a_ten_percent_canary_takes_about_ten_percent_of_users_and_always_the_same_ones() {
    let d = temp_dir("admin-canary");
    let e = Engine::start(&d, "canary", &config(&d, ""));
    let cand = upload(
        &e,
        "alice",
        json!({"edge/x.rhai": rule("x", "()"), "gateway/g.rhai": rule("g", "()")}),
    );
    assert_eq!(stage(&e, "alice", &cand, "canary", Some(10.0)).0, 200);
    let users = 3000;
    let arms = |round: u64| -> Vec<String> {
        let mut out = Vec::new();
        for chunk in (0..users).collect::<Vec<u64>>().chunks(100) {
            let items: Vec<Value> = chunk
                .iter()
                .map(|u| {
                    signed(
                        &format!("user-{u}"),
                        "198.51.100.7",
                        support::nonce(&format!("c{round}"), *u),
                    )
                })
                .collect();
            for (u, d) in chunk.iter().zip(batch(&e, &items)) {
                assert_eq!(d["code"], "OK", "user {u}: {d}");
                let arm = d["ruleset"]["arm"].as_str().unwrap().to_string();
                let version = d["ruleset"]["version"].as_str().unwrap();
                assert_eq!(
                    arm == "canary",
                    version == cand,
                    "the arm names the set that judged"
                );
                out.push(arm);
            }
        }
        out
    };
    let first = arms(1);
    let share = first.iter().filter(|a| *a == "canary").count() as f64 / users as f64;
    assert!((0.08..=0.12).contains(&share), "canary share {share}");
    assert_eq!(arms(2), first, "the same users on the same arm every time");
    let (_, r) = call(&e, "GET", "/admin/v1/rollout", Some(&basic("vera")), None);
    let c = r["stats"]["canary"]["decisions"].as_u64().unwrap();
    assert_eq!(
        c + r["stats"]["stable"]["decisions"].as_u64().unwrap(),
        2 * users
    );
}

#[test]
fn a_bad_canary_is_rolled_back_automatically_and_the_audit_log_says_so() {
    let d = temp_dir("admin-rollback");
    let e = Engine::start(&d, "rollback", &config(&d, "canary_min_samples = 50\n"));
    let bad = upload(
        &e,
        "alice",
        json!({"business/deny.rhai": rule("deny-all", "deny(\"oops\")")}),
    );
    assert_eq!(stage(&e, "alice", &bad, "canary", Some(50.0)).0, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    let rolled_back = loop {
        let items: Vec<Value> = (0..100)
            .map(|k| {
                signed(
                    &format!("u{}", i * 100 + k),
                    "198.51.100.9",
                    support::nonce("rb", i * 100 + k),
                )
            })
            .collect();
        batch(&e, &items);
        i += 1;
        let (_, r) = call(&e, "GET", "/admin/v1/rollout", Some(&basic("vera")), None);
        if r["candidate"].is_null() {
            break r;
        }
        assert!(Instant::now() < deadline, "not rolled back: {r}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let ev = &rolled_back["history"][0];
    assert_eq!(ev["action"], "auto-rollback");
    assert_eq!(ev["version"], bad.as_str());
    assert!(
        ev["reason"].as_str().unwrap().contains("refusal rate"),
        "{ev}"
    );
    let (_, a) = call(
        &e,
        "GET",
        "/admin/v1/audit?action=rollout.auto-rollback",
        Some(&basic("vera")),
        None,
    );
    let entry = &a["entries"][0];
    assert_eq!(entry["actor"], "auto-rollback");
    assert_eq!(entry["target"], bad.as_str());
    assert!(entry["detail"]["reason"].is_string());
    // Everyone is back on stable.
    let items: Vec<Value> = (0..50)
        .map(|k| {
            signed(
                &format!("after{k}"),
                "198.51.100.9",
                support::nonce("after", k),
            )
        })
        .collect();
    for d in batch(&e, &items) {
        assert_eq!(
            (d["code"].as_str(), d["ruleset"]["arm"].as_str()),
            (Some("OK"), Some("stable"))
        );
    }
    assert!(e
        .metrics()
        .contains("rampart_rollout_auto_rollbacks_total 1"));
}

#[test]
fn versions_rollout_state_and_lists_survive_a_restart() {
    let d = temp_dir("admin-restart");
    let cfg = config(&d, "");
    let mut e = Engine::start(&d, "restart", &cfg);
    let (_, before) = call(&e, "GET", "/admin/v1/rulesets", Some(&basic("vera")), None);
    let stable = before["stable"].as_str().unwrap().to_string();
    let cand = upload(
        &e,
        "alice",
        json!({"edge/x.rhai": rule("x", "if req.path == \"/blocked\" { deny(\"no\") }")}),
    );
    assert_eq!(stage(&e, "alice", &cand, "canary", Some(20.0)).0, 200);
    let (st, entry) = call(
        &e,
        "POST",
        "/admin/v1/lists",
        Some(&basic("alice")),
        Some(&json!({"list": "block", "kind": "ip", "value": "203.0.113.0/24", "note": "abuse"})),
    );
    assert_eq!(st, 201, "{entry}");
    let blocked = |e: &Engine| {
        let d = batch(
            e,
            &[signed(
                "u1",
                "203.0.113.50",
                support::nonce(&format!("b{}", now_ms()), 1),
            )],
        );
        d[0]["rule"] == "blocklist" && d[0]["code"] == "RULE_DENY"
    };
    assert!(blocked(&e));
    assert!(e.stop().success());

    let e = Engine::start(&d, "restart", &cfg);
    let (_, after) = call(&e, "GET", "/admin/v1/rulesets", Some(&basic("vera")), None);
    assert_eq!(after["stable"], stable.as_str());
    assert_eq!(after["candidate"]["version"], cand.as_str());
    assert_eq!(after["candidate"]["percent"], 20.0);
    let versions: Vec<&str> = after["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert!(versions.contains(&cand.as_str()) && versions.contains(&stable.as_str()));
    let (_, doc) = call(
        &e,
        "GET",
        &format!("/admin/v1/rulesets/{cand}"),
        Some(&basic("vera")),
        None,
    );
    assert_eq!(doc["author"], "alice");
    assert!(doc["sources"]["edge/x.rhai"]
        .as_str()
        .unwrap()
        .contains("/blocked"));
    let (_, diff) = call(
        &e,
        "GET",
        &format!("/admin/v1/rulesets/{cand}/diff?against={stable}"),
        Some(&basic("vera")),
        None,
    );
    let files = diff["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .any(|f| f["path"] == "edge/x.rhai" && f["status"] == "added"),
        "{diff}"
    );
    assert!(
        files
            .iter()
            .any(|f| f["path"] == "edge/base.rhai" && f["status"] == "removed"),
        "{diff}"
    );
    assert!(blocked(&e), "the block list outlives the restart");
    // The candidate (canary) is live again, and approval still works after the restart.
    let (_, cur) = call(
        &e,
        "GET",
        "/admin/v1/rulesets/current",
        Some(&basic("vera")),
        None,
    );
    assert_eq!(cur["candidate"]["version"], cand.as_str());
    let (st, _) = call(
        &e,
        "POST",
        "/admin/v1/rollout/approve",
        Some(&basic("bob")),
        Some(&json!({"version": cand})),
    );
    assert_eq!(st, 200);
    // The earlier stable version can be re-activated at once (it was approved before).
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{stable}/activate"),
        Some(&basic("alice")),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stable"], stable.as_str());
    // A version that was never approved cannot be activated that way.
    let never = upload(&e, "alice", json!({"edge/z.rhai": rule("z", "()")}));
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{never}/activate"),
        Some(&basic("alice")),
        None,
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("NOT_APPROVED"))
    );
}

#[test]
fn lists_apply_on_every_instance_within_a_second_and_expire() {
    let redis = RedisServer::start();
    let d = temp_dir("admin-lists");
    let extra = format!(
        "[state]\nbackend = \"redis\"\nredis_url = \"{}\"\n",
        redis.url()
    );
    let cfg = config(&d, "").replacen("[admin]", &format!("{extra}[admin]"), 1);
    let a = Engine::start(&d, "a", &cfg);
    let b = Engine::start(&d, "b", &cfg);
    let decide = |e: &Engine, user: &str, ip: &str, i: u64| {
        batch(
            e,
            &[signed(
                user,
                ip,
                support::nonce(&format!("l{}", now_ms()), i),
            )],
        )
        .remove(0)
    };
    assert_eq!(decide(&b, "mallory", "198.51.100.1", 1)["code"], "OK");
    let (st, _) = call(
        &a,
        "POST",
        "/admin/v1/lists",
        Some(&basic("alice")),
        Some(&json!({"list": "block", "kind": "user", "value": "mallory", "ttl_ms": 2500})),
    );
    assert_eq!(st, 201);
    let t0 = Instant::now();
    loop {
        if decide(&b, "mallory", "198.51.100.1", 2)["rule"] == "blocklist" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "instance b did not apply the block within 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        decide(&b, "alice-the-user", "198.51.100.1", 3)["code"],
        "OK"
    );
    // Expiry: the entry lapses by itself.
    std::thread::sleep(Duration::from_millis(2800));
    assert_eq!(decide(&a, "mallory", "198.51.100.1", 4)["code"], "OK");
    assert_eq!(decide(&b, "mallory", "198.51.100.1", 5)["code"], "OK");
    // An allow-listed requester skips the rules, never the anti-replay core.
    let (st, _) = call(
        &a,
        "POST",
        "/admin/v1/lists",
        Some(&basic("alice")),
        Some(&json!({"list": "allow", "kind": "ip", "value": "192.0.2.0/24"})),
    );
    assert_eq!(st, 201);
    std::thread::sleep(Duration::from_millis(1000));
    let req = signed("vip", "192.0.2.10", support::nonce("vip", 1));
    let d = batch(&b, std::slice::from_ref(&req)).remove(0);
    assert_eq!(
        (d["code"].as_str(), d["rule"].as_str()),
        (Some("OK"), Some("allowlist"))
    );
    assert_eq!(batch(&a, &[req])[0]["code"], "REPLAY_DUPLICATE");
    // Bad entries are refused with a clear code.
    for bad in [
        json!({"list": "block", "kind": "ip", "value": "10.0.0.0/40"}),
        json!({"list": "block", "kind": "ja3", "value": "not-hex"}),
        json!({"list": "maybe", "kind": "user", "value": "x"}),
        json!({"list": "block", "kind": "user", "value": "x", "ttl_ms": -5}),
    ] {
        let (st, v) = call(
            &a,
            "POST",
            "/admin/v1/lists",
            Some(&basic("alice")),
            Some(&bad),
        );
        assert_eq!(st, 400, "{bad}: {v}");
        assert!(v["error"]["code"] == "INVALID_FIELD", "{v}");
    }
    // Both instances share one rollout state too.
    let cand = upload(&a, "alice", json!({"edge/x.rhai": rule("x", "()")}));
    assert_eq!(stage(&a, "alice", &cand, "shadow", None).0, 200);
    let t0 = Instant::now();
    loop {
        let (_, cur) = call(
            &b,
            "GET",
            "/admin/v1/rulesets/current",
            Some(&basic("vera")),
            None,
        );
        if cur["candidate"]["version"] == cand.as_str() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "{cur}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sessions_need_csrf_for_changes_logout_revokes_and_logins_are_throttled() {
    let d = temp_dir("admin-session");
    let e = Engine::start(&d, "session", &config(&d, "login_max_failures = 3\n"));
    let login = |user: &str, pw: &str| {
        let mut r = agent()
            .post(&format!("{}/admin/v1/login", e.base))
            .send(json!({"user": user, "password": pw}).to_string())
            .unwrap();
        let st = r.status().as_u16();
        let cookie = r
            .headers()
            .get("set-cookie")
            .map(|v| v.to_str().unwrap().to_string());
        let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        (st, cookie, body)
    };
    let (st, cookie, body) = login("alice", "alice-pw");
    assert_eq!(st, 200, "{body}");
    let cookie = cookie.unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let csrf = body["csrf_token"].as_str().unwrap().to_string();
    let with_cookie = |method: &str, path: &str, csrf: Option<&str>, b: Option<Value>| {
        let url = format!("{}{path}", e.base);
        let a = agent();
        let r = if method == "GET" {
            a.get(&url).header("cookie", &pair).call()
        } else {
            let mut rq = a.post(&url).header("cookie", &pair);
            if let Some(c) = csrf {
                rq = rq.header("x-csrf-token", c);
            }
            rq.send(b.unwrap_or(Value::Null).to_string())
        };
        let mut r = r.unwrap();
        let st = r.status().as_u16();
        (
            st,
            serde_json::from_str::<Value>(&r.body_mut().read_to_string().unwrap())
                .unwrap_or(Value::Null),
        )
    };
    let (st, me) = with_cookie("GET", "/admin/v1/session", None, None);
    assert_eq!(
        (st, me["user"].as_str(), me["role"].as_str()),
        (200, Some("alice"), Some("author"))
    );
    let entry = json!({"list": "block", "kind": "user", "value": "x"});
    let (st, v) = with_cookie("POST", "/admin/v1/lists", None, Some(entry.clone()));
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (403, Some("CSRF_FAILED"))
    );
    let (st, _) = with_cookie("POST", "/admin/v1/lists", Some("0000"), Some(entry.clone()));
    assert_eq!(st, 403);
    let (st, _) = with_cookie("POST", "/admin/v1/lists", Some(&csrf), Some(entry));
    assert_eq!(st, 201);
    let (st, _) = with_cookie("POST", "/admin/v1/logout", Some(&csrf), None);
    assert_eq!(st, 200);
    let (st, _) = with_cookie("GET", "/admin/v1/session", None, None);
    assert_eq!(st, 401, "a logged-out session is dead");

    // Throttling: three failures lock the name out, even for the right password.
    for _ in 0..3 {
        assert_eq!(login("bob", "nope").0, 401);
    }
    let (st, _, body) = login("bob", "bob-pw");
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (429, Some("LOGIN_THROTTLED"))
    );
    let (st, _, _) = login("nobody", "x");
    assert_eq!(st, 429, "the client address is locked out as well");
}

/// Login throttling keys on the client address the trusted proxies report, not on the TCP peer:
/// behind a load balancer (here, loopback, trusted by default) one client's failures must not
/// lock every other client out. Before, every login through the balancer shared one counter.
#[test]
fn login_throttling_keys_on_the_client_behind_a_trusted_proxy() {
    let d = temp_dir("admin-throttle-xff");
    let e = Engine::start(&d, "throttle", &config(&d, "login_max_failures = 3\n"));
    let login = |user: &str, xff: &str| -> u16 {
        agent()
            .post(&format!("{}/admin/v1/login", e.base))
            .header("content-type", "application/json")
            .header("x-forwarded-for", xff)
            .send(json!({"user": user, "password": "wrong"}).to_string())
            .unwrap()
            .status()
            .as_u16()
    };
    // Three names (each below its own limit) from one client lock that client out.
    for u in ["u1", "u2", "u3"] {
        assert_eq!(login(u, "198.51.100.1"), 401);
    }
    assert_eq!(login("u4", "198.51.100.1"), 429, "the client is locked out");
    // Another client through the same balancer is not.
    assert_eq!(
        login("u5", "198.51.100.2"),
        401,
        "another client is not locked out"
    );
}

#[test]
fn the_regression_endpoint_reports_rates_hits_and_changed_samples() {
    let d = temp_dir("admin-regress");
    // Built-in rules and samples.
    let cfg = format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"admin-test-secret\"\n[admin]\ncookie_secure = false\n{}",
        users()
    );
    let e = Engine::start(&d, "regress", &cfg);
    let (_, stable) = call(
        &e,
        "GET",
        "/admin/v1/rulesets/stable",
        Some(&basic("vera")),
        None,
    );
    // The candidate drops the SQL injection rule.
    let mut files = stable["sources"].as_object().unwrap().clone();
    assert!(files.remove("edge/waf-sqli.rhai").is_some());
    let cand = upload(&e, "alice", Value::Object(files));
    let (st, r) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/regress"),
        Some(&basic("alice")),
        None,
    );
    assert_eq!(st, 200, "{r}");
    assert!(r["samples"].as_u64().unwrap() > 100);
    assert!(r["detection"]["total"].as_u64().unwrap() > 0);
    assert!(r["rule_hits"]
        .as_object()
        .unwrap()
        .keys()
        .any(|k| k.starts_with("edge/")));
    let changes = r["changes"].as_array().unwrap();
    assert!(
        !changes.is_empty(),
        "dropping a WAF rule changes attack samples"
    );
    // An uploaded sample is run too; a malformed one is refused with a clear code.
    let sample = json!({"name": "uploaded-benign", "kind": "benign", "request": {"app": "shop", "request": {"method": "GET", "path": "/"}}, "expect": {"action": "allow"}});
    let (st, r) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/regress"),
        Some(&basic("alice")),
        Some(&json!({"samples": [sample], "only_uploaded": true})),
    );
    assert_eq!((st, r["samples"].as_u64()), (200, Some(1)), "{r}");
    let (st, r) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/regress"),
        Some(&basic("alice")),
        Some(&json!({"samples": [{"name": 1}]})),
    );
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (400, Some("INVALID_SAMPLE"))
    );
}

#[test]
fn a_backtest_over_the_recorded_log_matches_a_direct_replay() {
    let d = temp_dir("admin-backtest");
    let e = Engine::start(&d, "bt", &config(&d, ""));
    let n = 240u64;
    let traffic = |tag: &str| -> Vec<Value> {
        (0..n)
            .map(|i| {
                let path = ["/shop/a", "/admin/x", "/shop/b"][(i % 3) as usize];
                let mut j = Call {
                    app: "shop",
                    secret: SECRET,
                    path,
                    body: format!("{{\"i\":{i}}}"),
                    user: &format!("u{i}"),
                    ip: "198.51.100.20",
                    device: "",
                    nonce: support::nonce(tag, i),
                    ts_ms: now_ms(),
                    params: json!({ "i": i }),
                }
                .json();
                if i % 4 == 0 {
                    j["request"]["headers"]["x-tier"] = json!("gold");
                }
                j
            })
            .collect()
    };
    let recorded = traffic("bt-a");
    for chunk in recorded.chunks(60) {
        for d in batch(&e, chunk) {
            assert_eq!(d["code"], "OK", "{d}");
        }
    }
    // Replays are in the log too, but were stopped before the rules: not comparable.
    for d in batch(&e, &recorded[..10]) {
        assert_eq!(d["code"], "REPLAY_DUPLICATE");
    }
    // Every decision already answered is in the log's answer at once (the query flushes the
    // writer first): no waiting.
    let (_, v) = call(
        &e,
        "GET",
        "/admin/v1/decisions?limit=1000",
        Some(&basic("vera")),
        None,
    );
    let rows = v["decisions"].as_array().map_or(0, Vec::len);
    assert_eq!(rows as u64, n + 10, "log has {rows} rows");
    assert!(
        v["decisions"][0]["request"]["headers"].is_object(),
        "{}",
        v["decisions"][0]
    );
    assert!(v["decisions"][0]["request"]["headers"]
        .get("x-signature")
        .is_none());
    let candidate = json!({
        "edge/admin-deny.rhai": rule("admin-deny", "if req.path.starts_with(\"/admin\") { deny(\"admin closed\") }"),
        "gateway/gold-review.rhai": rule("gold-review", "if req.header(\"x-tier\") == \"gold\" { review(\"gold tier\") }"),
    });
    let cand = upload(&e, "alice", candidate.clone());
    let (st, bt) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/backtest"),
        Some(&basic("alice")),
        Some(&json!({"hours": 1, "examples": 5})),
    );
    assert_eq!(st, 200, "{bt}");
    assert_eq!(bt["rows"], n + 10);
    assert_eq!(bt["replayed"], n);
    assert_eq!(bt["not_rules"], 10);
    assert_eq!(bt["examples"].as_array().unwrap().len(), 5);

    // The direct replay: the same requests (fresh nonces) through an engine running the candidate.
    let d2 = temp_dir("admin-backtest-direct");
    let dir2 = d2.join("rules");
    for (path, text) in candidate.as_object().unwrap() {
        let p = dir2.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text.as_str().unwrap()).unwrap();
    }
    let direct = Engine::start(&d2, "direct", &format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"admin-test-secret\"\nwindow_ms = 60000\n[rules]\ndir = \"{}\"\n",
        dir2.display()
    ));
    let mut by_rule = std::collections::BTreeMap::<String, u64>::new();
    let mut by_action = std::collections::BTreeMap::<String, u64>::new();
    for chunk in traffic("bt-b").chunks(60) {
        for d in batch(&direct, chunk) {
            if d["code"] != "OK" {
                *by_rule
                    .entry(format!(
                        "{}/{}",
                        d["tier"].as_str().unwrap(),
                        d["rule"].as_str().unwrap()
                    ))
                    .or_default() += 1;
                *by_action
                    .entry(format!("allow → {}", d["action"].as_str().unwrap()))
                    .or_default() += 1;
            }
        }
    }
    let changed: u64 = by_rule.values().sum();
    assert!(changed > 0);
    assert_eq!(bt["changed"], changed, "{bt}");
    for (rule, count) in &by_rule {
        assert_eq!(bt["by_rule"][rule]["gains"], *count, "{rule}: {bt}");
    }
    for (a, count) in &by_action {
        assert_eq!(bt["by_action"][a], *count, "{a}: {bt}");
    }
    // Bad input gets a clear code.
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/backtest"),
        Some(&basic("alice")),
        Some(&json!({"hours": 0})),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("INVALID_FIELD"))
    );
    let (st, _) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{cand}/backtest"),
        Some(&basic("vera")),
        None,
    );
    assert_eq!(st, 403);
}

#[test]
fn json_logs_carry_the_request_id_and_the_level_changes_at_run_time() {
    let d = temp_dir("admin-logs");
    let cfg = format!(
        "{}\n[log]\nformat = \"json\"\nlevel = \"info\"\n",
        config(&d, "")
    );
    let e = Engine::start(&d, "logs", &cfg);
    let cand = upload(&e, "alice", json!({"edge/x.rhai": rule("x", "()")}));
    // The caller's id is kept and echoed; the change logs a line inside the request's span.
    let r = agent()
        .post(&format!("{}/admin/v1/rollout", e.base))
        .header("authorization", basic("alice"))
        .header("x-request-id", "change-7f3a")
        .send(json!({"version": cand, "stage": "shadow"}).to_string())
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("x-request-id").unwrap(), "change-7f3a");
    // Without one (or with a bad one), the engine makes one up.
    let r = agent()
        .get(&format!("{}/healthz", e.base))
        .header("x-request-id", "bad id\twith tab")
        .call()
        .unwrap();
    let made = r
        .headers()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(!made.contains(' ') && !made.is_empty(), "{made}");
    let stderr = std::fs::read_to_string(d.join("logs.stderr")).unwrap();
    let line = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["span"]["request_id"] == "change-7f3a")
        .unwrap_or_else(|| panic!("no log line with the request id:\n{stderr}"));
    assert!(
        line["message"].as_str().unwrap().contains("candidate"),
        "{line}"
    );
    assert!(
        line["level"].is_string() && line["timestamp"].is_string(),
        "{line}"
    );
    // Debug lines appear only after the level is raised at run time.
    let (st, _) = call(
        &e,
        "PUT",
        "/admin/v1/settings/log-level",
        Some(&basic("root")),
        Some(&json!({"level": "debug"})),
    );
    assert_eq!(st, 200);
    let (st, _) = call(
        &e,
        "PUT",
        "/admin/v1/settings/log-level",
        Some(&basic("alice")),
        Some(&json!({"level": "trace"})),
    );
    assert_eq!(st, 403);
    let (_, a) = call(
        &e,
        "GET",
        "/admin/v1/audit?action=settings",
        Some(&basic("vera")),
        None,
    );
    assert_eq!(a["entries"][0]["after"], "debug");
    assert_eq!(a["entries"][0]["before"], "info");
}

#[test]
fn validate_locates_problems_without_storing_and_traces_show_every_step_and_rule() {
    let d = temp_dir("admin-trace");
    let e = Engine::start(&d, "trace", &config(&d, ""));
    let alice = basic("alice");
    let before = call(&e, "GET", "/admin/v1/rulesets", Some(&alice), None).1["versions"]
        .as_array()
        .unwrap()
        .len();

    // A draft with an error: located, nothing stored.
    let broken = json!({"files": {
        "edge/base.rhai": rule("base", "()"),
        "edge/broken.rhai": rule("broken", "if req.path == \"/x\" {\n    deny(\"x\"\n}"),
    }});
    let (st, v) = call(
        &e,
        "POST",
        "/admin/v1/rulesets/validate",
        Some(&alice),
        Some(&broken),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["valid"], false);
    let p = &v["problems"][0];
    assert_eq!(p["file"], "edge/broken.rhai", "{v}");
    assert!(p["line"].as_u64().unwrap() >= 6, "{v}");
    assert!(!p["message"].as_str().unwrap().is_empty());
    let after = call(&e, "GET", "/admin/v1/rulesets", Some(&alice), None).1["versions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "validation stores nothing");
    // Valid: the rules it would run.
    let fixed = json!({"files": {
        "edge/base.rhai": rule("base", "()"),
        "edge/legacy.rhai": rule("legacy", "if req.path == \"/legacy\" { deny(\"retired\") }"),
    }});
    let (st, v) = call(
        &e,
        "POST",
        "/admin/v1/rulesets/validate",
        Some(&alice),
        Some(&fixed),
    );
    assert_eq!((st, &v["valid"]), (200, &json!(true)), "{v}");
    assert_eq!(v["rules"].as_array().unwrap().len(), 2);
    assert_eq!(v["problems"], json!([]));
    // Bad bodies get their codes.
    for (body, code) in [
        (json!({}), "INVALID_FIELD"),
        (json!({"files": {"a": 1}}), "INVALID_FIELD"),
        (json!({"files": {}, "extra": 1}), "INVALID_FIELD"),
    ] {
        let (st, v) = call(
            &e,
            "POST",
            "/admin/v1/rulesets/validate",
            Some(&alice),
            Some(&body),
        );
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }

    // A sample's trace: the whole decision path in order, the deciding step last.
    let version = upload(&e, "alice", fixed["files"].clone());
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{version}/trace"),
        Some(&alice),
        Some(&json!({"sample": "scenario-replay-burst-payment"})),
    );
    if st == 404 {
        panic!("the built-in samples have no scenario-replay-burst-payment: {v}");
    }
    assert_eq!(st, 200, "{v}");
    let steps: Vec<&str> = v["trace"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        ["lists", "edge", "signature", "window", "nonce"],
        "{v}"
    );
    let last = v["trace"]["steps"].as_array().unwrap().last().unwrap();
    assert!(
        last["outcome"]
            .as_str()
            .unwrap()
            .starts_with("deny REPLAY_DUPLICATE"),
        "{v}"
    );
    assert_eq!(v["result"]["got"]["code"], "REPLAY_DUPLICATE");
    let edge_rules: Vec<&str> = v["trace"]["steps"][1]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        edge_rules,
        ["base", "legacy"],
        "every edge rule is listed: {v}"
    );
    assert!(v["trace"]["total_us"].as_f64().unwrap() > 0.0);
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{version}/trace"),
        Some(&alice),
        Some(&json!({"sample": "no-such-sample"})),
    );
    assert_eq!((st, v["error"]["code"].as_str()), (404, Some("NOT_FOUND")));

    // A recorded decision replayed through the rule tiers.
    let (st, _) = e.decide(&json!({
        "app": "shop",
        "request": {"method": "GET", "path": "/legacy", "headers": {"user-agent": "t"}},
        "client": {"ip": "198.51.100.7"}
    }));
    assert_eq!(st, 200);
    let row = (0..50)
        .find_map(|_| {
            let (_, v) = call(
                &e,
                "GET",
                "/admin/v1/decisions?route=/legacy",
                Some(&alice),
                None,
            );
            let row = v["decisions"][0].clone();
            if row.is_null() {
                std::thread::sleep(Duration::from_millis(100));
                None
            } else {
                Some(row)
            }
        })
        .expect("the decision reaches the log");
    let (st, v) = call(
        &e,
        "POST",
        &format!("/admin/v1/rulesets/{version}/trace"),
        Some(&alice),
        Some(&json!({ "decision": row })),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["kind"], "replay");
    assert_eq!(v["replayed"]["code"], "RULE_DENY", "{v}");
    assert_eq!(v["replayed"]["rule"], "legacy");
    let steps: Vec<&str> = v["trace"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["edge"]);
    for body in [json!({}), json!({"sample": "x", "decision": {}})] {
        let (st, v) = call(
            &e,
            "POST",
            "/admin/v1/rulesets/stable/trace",
            Some(&alice),
            Some(&body),
        );
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some("INVALID_FIELD"))
        );
    }

    // Settings: what shapes decisions, never a secret.
    let (st, v) = call(&e, "GET", "/admin/v1/settings", Some(&basic("vera")), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["apps"][0]["id"], "shop");
    assert_eq!(v["apps"][0]["window_ms"], 60000);
    assert_eq!(v["state"]["on_store_error"]["quotas"], "deny");
    assert_eq!(v["admin"]["users"].as_array().unwrap().len(), 5);
    let text = v.to_string();
    assert!(!text.contains("admin-test-secret"), "{text}");
    assert!(!text.contains("argon2"), "{text}");
}

/// Every uploaded version is compiled (validation needs it) and kept compiled for rollouts; the
/// cache holds at most `[admin] compiled_versions` (default 4), least recently used going first.
/// Before, it held 16 and then started over: the 30-minute soak's memory climbed by about a MiB
/// with every new version until the 16th, fell, and climbed again.
#[test]
fn compiled_rule_sets_stay_bounded_however_many_versions_are_uploaded() {
    let d = temp_dir("admin-compiled");
    let e = Engine::start(&d, "compiled", &config(&d, ""));
    let gauge = |e: &Engine, name: &str| -> i64 {
        e.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} is exported"))
            .trim()
            .parse()
            .unwrap()
    };
    let compiled = |e: &Engine| gauge(e, "rampart_ruleset_compiled_versions");
    let mut versions = Vec::new();
    for i in 0..40 {
        let body = format!("if req.path == \"/blocked-{i}\" {{ deny(\"no\") }}");
        versions.push(upload(
            &e,
            "alice",
            json!({"edge/x.rhai": rule("x", &body)}),
        ));
        let n = compiled(&e);
        assert!(
            (1..=4).contains(&n),
            "{n} versions compiled after {} uploads",
            i + 1
        );
        // Every set alive in the process: the cache's, the live one, and a decision's at most.
        let alive = gauge(&e, "rampart_rulesets_alive");
        assert!(
            alive <= 4 + 2,
            "{alive} rule sets alive after {} uploads",
            i + 1
        );
    }
    // Distinct versions, every one still usable (a version evicted from the cache compiles again).
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), 40);
    assert_eq!(
        stage(&e, "alice", &versions[0], "canary", Some(10.0)).0,
        200
    );
    assert!(compiled(&e) <= 4);
}

/// `rampart audit verify` against the config of instance `name` (its control directory), with
/// more export directories.
fn audit_verify(d: &Path, name: &str, exports: &[&Path]) -> (i32, String) {
    let mut cmd = std::process::Command::new(support::bin());
    cmd.args(["audit", "verify", "--config"])
        .arg(d.join(format!("{name}.toml")))
        .env("RAMPART_ADMIN_STATE_DIR", d.join(format!("{name}-control")));
    for x in exports {
        cmd.arg("--exports").arg(x);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &*String::from_utf8_lossy(&out.stderr),
    )
}

/// The shared (Redis) audit log: two instances append to one hash chain; past
/// `audit_max_entries` the oldest entries move to the appending instance's export files, never
/// dropped; `rampart audit verify` checks the chain through the exports and names an altered
/// entry. Before, the Redis list grew for good and nothing could tell an edited entry.
#[test]
fn the_shared_audit_log_is_bounded_exported_and_tamper_evident() {
    let redis = RedisServer::start();
    let d = temp_dir("admin-audit-chain");
    let extra = format!(
        "[state]\nbackend = \"redis\"\nredis_url = \"{}\"\n",
        redis.url()
    );
    let cfg =
        config(&d, "audit_max_entries = 10").replacen("[admin]", &format!("{extra}[admin]"), 1);
    let a = Engine::start(&d, "a", &cfg);
    let b = Engine::start(&d, "b", &cfg);
    for i in 0..30 {
        let e = if i % 2 == 0 { &a } else { &b };
        let body = format!("if req.path == \"/audit-{i}\" {{ deny(\"no\") }}");
        upload(e, "alice", json!({"edge/x.rhai": rule("x", &body)}));
        let len: usize = redis
            .cli(&["LLEN", "rampart:ctl:{ctl}:audit"])
            .trim()
            .parse()
            .unwrap();
        assert!(len <= 11, "{len} entries in Redis after {} uploads", i + 1);
    }
    let bx = d.join("b-control").join("audit");
    let (code, out) = audit_verify(&d, "a", &[&bx]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("chain intact"), "{out}");
    let total: usize = out
        .split("audit log: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(total >= 30, "{out}");
    // Without the other instance's exports, the gap shows.
    if std::fs::read_dir(&bx).is_ok_and(|mut r| r.next().is_some()) {
        let (code, out) = audit_verify(&d, "a", &[]);
        assert_eq!(code, 1, "{out}");
    }
    // An entry altered in Redis is named.
    let third = redis.cli(&["LINDEX", "rampart:ctl:{ctl}:audit", "2"]);
    let forged = third
        .trim()
        .replacen("\"actor\":\"alice\"", "\"actor\":\"mallory\"", 1);
    assert_ne!(forged, third.trim());
    redis.cli(&["LSET", "rampart:ctl:{ctl}:audit", "2", &forged]);
    let (code, out) = audit_verify(&d, "a", &[&bx]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BROKEN") && out.contains("does not chain"),
        "{out}"
    );
}

/// `[server] admin_listen` moves the operator plane (admin API, console, `/metrics`) to its own
/// listener: the decision listener no longer answers them, and the operator listener answers no
/// decisions. `[server] metrics_token` closes `/metrics` to callers without it. Before, all of
/// it shared the decision listener and `/metrics` was open to anyone who reached the port.
#[test]
fn the_operator_plane_has_its_own_listener_and_metrics_need_their_token() {
    let dir = temp_dir("admin-listener");
    let ops_port = support::free_port();
    let ops = format!("http://127.0.0.1:{ops_port}");
    let token = "metrics-token-0123456789";
    let e = Engine::start_with_env(
        &dir,
        "split",
        &config(&dir, ""),
        &[
            (
                "RAMPART_SERVER_ADMIN_LISTEN",
                &format!("127.0.0.1:{ops_port}"),
            ),
            ("RAMPART_SERVER_METRICS_TOKEN", token),
        ],
    );
    let status = |url: &str, auth: Option<&str>| -> u16 {
        let mut rq = agent().get(url);
        if let Some(a) = auth {
            rq = rq.header("authorization", a);
        }
        rq.call().unwrap().status().as_u16()
    };
    // The decision listener: decisions, health; no admin API, console or metrics.
    let (s, v) = support::post(
        &format!("{}/v1/decide", e.base),
        &signed("u1", "198.51.100.1", "ops-listener-nonce-0001".into()),
    );
    assert_eq!((s, v["code"].as_str()), (200, Some("OK")), "{v}");
    assert_eq!(status(&format!("{}/healthz", e.base), None), 200);
    for path in ["/admin/v1/session", "/console/", "/metrics"] {
        assert_eq!(
            status(&format!("{}{path}", e.base), Some(&basic("vera"))),
            404,
            "{path}"
        );
    }
    // The operator listener: the admin API, the console, metrics (with the token); no decisions.
    assert_eq!(
        status(&format!("{ops}/admin/v1/session"), Some(&basic("vera"))),
        200
    );
    assert_eq!(status(&format!("{ops}/admin/v1/session"), None), 401);
    assert_ne!(status(&format!("{ops}/console/"), None), 404);
    assert_eq!(status(&format!("{ops}/metrics"), None), 401);
    assert_eq!(
        status(
            &format!("{ops}/metrics"),
            Some("Bearer wrong-token-0123456789")
        ),
        401
    );
    assert_eq!(
        status(&format!("{ops}/metrics"), Some(&format!("Bearer {token}"))),
        200
    );
    let (s, _) = support::post(
        &format!("{ops}/v1/decide"),
        &signed("u1", "198.51.100.1", "ops-listener-nonce-0002".into()),
    );
    assert_eq!(s, 404);
    drop(e);
}

/// Reports downstream outcomes of `route` to `e` (signed as `/v1/outcome` requires).
fn report_outcomes(e: &Engine, route: &str, statuses: &[u16], tag: &str) {
    let report = Value::Array(
        statuses
            .iter()
            .map(|s| json!({"app": "shop", "route": route, "status": s, "latency_ms": 5}))
            .collect(),
    )
    .to_string();
    let h = rampart_core::replay::sign::sign(
        SECRET,
        &rampart_core::replay::sign::ToSign {
            app: "shop",
            method: "POST",
            path: "/v1/outcome",
            query: "",
            body: report.as_bytes(),
            timestamp_ms: now_ms(),
            nonce: &support::nonce(tag, now_ms() as u64),
        },
    );
    let mut r = agent()
        .post(&format!("{}/v1/outcome", e.base))
        .header("content-type", "application/json")
        .header("x-timestamp", &h.timestamp)
        .header("x-nonce", &h.nonce)
        .header("x-signature", &h.signature)
        .send(report)
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "{}",
        r.body_mut().read_to_string().unwrap()
    );
}

/// A signed decide request for `path` from `user`.
fn on(e: &Engine, path: &str, user: &str, tag: &str) -> Value {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let i = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = Call {
        app: "shop",
        secret: SECRET,
        path,
        body: format!("{{\"i\":{i}}}"),
        user,
        ip: "198.51.100.60",
        device: "",
        params: Value::Null,
        nonce: support::nonce(tag, i),
        ts_ms: now_ms(),
    }
    .json();
    let (st, v) = support::post(&format!("{}/v1/decide", e.base), &body);
    assert_eq!(st, 200, "{v}");
    v
}

/// Waits (at most a second) until `f` holds on `e`.
fn within_a_second(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{what}: not within a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Repairs made through one instance hold on the other within `poll_ms`, with local state (each
/// instance repairs its own, from the shared control store) and with Redis state (repaired once
/// in Redis; the other instance forgets the refusal it had cached, which before this change kept
/// refusing for the limit's whole retry-after).
/// A rule file: its metadata (priority 10, on `route`) and `body`.
fn rule_file(name: &str, route: &str, body: &str) -> String {
    format!(
        "//! name: {name}\n//! priority: 10\n//! owner: secops\n//! description: test\n\
         //! routes: {route}\n{body}"
    )
}

/// Two instances, `a` and `b`, over the rule files `rules` (paths under `rules/`), with `state`
/// (a `[state]` section, or nothing for local state), sharing one control store (a directory;
/// Redis too with Redis state) and reading it every 100 ms.
fn two_instances(d: &Path, rules: &[(&str, String)], state: &str) -> (Engine, Engine) {
    let r = d.join("rules");
    for (path, text) in rules {
        let f = r.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    let cfg = format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"admin-test-secret\"\nwindow_ms = 60000\n\
         [rules]\ndir = \"{}\"\nreload = false\n{state}[admin]\ncookie_secure = false\npoll_ms = 100\n{}",
        r.display(),
        users()
    );
    let control = d.join("control");
    let env = [("RAMPART_ADMIN_STATE_DIR", control.to_str().unwrap())];
    (
        Engine::start_with_env(d, "a", &cfg, &env),
        Engine::start_with_env(d, "b", &cfg, &env),
    )
}

#[test]
fn limit_and_breaker_repairs_apply_on_every_instance_within_poll_ms() {
    let redis = RedisServer::start();
    for backend in ["local", "redis"] {
        let d = temp_dir(&format!("admin-repairs-{backend}"));
        let state = match backend {
            "redis" => format!(
                "[state]\nbackend = \"redis\"\nredis_url = \"{}\"\n",
                redis.url()
            ),
            _ => String::new(),
        };
        let (a, b) = two_instances(
            &d,
            &[
                (
                    "gateway/slow-down.rhai",
                    rule_file(
                        "slow-down",
                        "/api/items",
                        r#"if !rate_limit("user:" + req.user, 0.001, 1) { deny("RATE_LIMITED", "slow down") }"#,
                    ),
                ),
                (
                    "gateway/pay.rhai",
                    rule_file(
                        "pay",
                        "/api/pay",
                        r#"if circuit_open(req, #{window_ms: 60000, min_requests: 4, error_ratio: 0.5, open_ms: 600000}) { deny("CIRCUIT_OPEN", "pay down") }"#,
                    ),
                ),
            ],
            &state,
        );
        let tag = format!("rp-{backend}");
        let user = format!("repair-{backend}-{}", std::process::id());

        // A user over their limit on both instances.
        assert_eq!(on(&a, "/api/items", &user, &tag)["code"], "OK");
        assert_eq!(on(&a, "/api/items", &user, &tag)["code"], "RATE_LIMITED");
        if backend == "local" {
            assert_eq!(on(&b, "/api/items", &user, &tag)["code"], "OK");
        }
        assert_eq!(on(&b, "/api/items", &user, &tag)["code"], "RATE_LIMITED");
        let reset = json!({"key": format!("user:{user}")});
        let (st, _) = call(
            &a,
            "POST",
            "/admin/v1/limits/reset",
            Some(&basic("vera")),
            Some(&reset),
        );
        assert_eq!(st, 403, "a viewer cannot repair");
        let (st, v) = call(
            &a,
            "POST",
            "/admin/v1/limits/reset",
            Some(&basic("alice")),
            Some(&reset),
        );
        assert_eq!(st, 200, "{v}");
        within_a_second(&format!("{backend}: b lets the user through again"), || {
            on(&b, "/api/items", &user, &tag)["code"] == "OK"
        });
        if backend == "local" {
            assert_eq!(on(&a, "/api/items", &user, &tag)["code"], "OK");
        }

        // The refusals gave the user a bad reputation, on b too (b's own with local state); a
        // reset through a clears it on b. (With local state it used to clear a's alone.)
        let points = |e: &Engine| {
            let (_, v) = call(
                e,
                "GET",
                &format!("/admin/v1/subjects/user/{user}"),
                Some(&basic("vera")),
                None,
            );
            v["reputation"]["points"].as_i64().unwrap_or(-1)
        };
        within_a_second(&format!("{backend}: b remembers the refusal"), || {
            points(&b) > 0
        });
        let (st, v) = call(
            &a,
            "POST",
            &format!("/admin/v1/subjects/user/{user}/reputation/reset"),
            Some(&basic("alice")),
            None,
        );
        assert_eq!(st, 200, "{v}");
        within_a_second(&format!("{backend}: b forgets the reputation"), || {
            points(&b) == 0
        });

        // The pay route's breaker tripped on both instances (each is fed its own outcomes).
        for e in [&a, &b] {
            assert_eq!(on(e, "/api/pay", &user, &tag)["code"], "OK");
            report_outcomes(e, "/api/pay", &[500, 500, 500, 500, 500], &tag);
            assert_eq!(on(e, "/api/pay", &user, &tag)["code"], "CIRCUIT_OPEN");
        }
        let (_, v) = call(&b, "GET", "/admin/v1/breakers", Some(&basic("vera")), None);
        assert_eq!(v["breakers"][0]["route"], "/api/pay", "{v}");
        assert_eq!(v["breakers"][0]["state"], "open", "{v}");
        assert_eq!(v["breakers"][0]["error_ratio"], 1.0, "{v}");
        let pay = json!({"app": "shop", "route": "/api/pay"});
        let (st, v) = call(
            &a,
            "POST",
            "/admin/v1/breakers/close",
            Some(&basic("alice")),
            Some(&pay),
        );
        assert_eq!(st, 200, "{v}");
        assert_eq!(on(&a, "/api/pay", &user, &tag)["code"], "OK");
        within_a_second(&format!("{backend}: b's breaker closes"), || {
            on(&b, "/api/pay", &user, &tag)["code"] == "OK"
        });
        // Forced open through b, for a minute: a refuses too.
        let open = json!({"app": "shop", "route": "/api/pay", "for_ms": 60000});
        let (st, v) = call(
            &b,
            "POST",
            "/admin/v1/breakers/open",
            Some(&basic("alice")),
            Some(&open),
        );
        assert_eq!(st, 200, "{v}");
        within_a_second(&format!("{backend}: a's breaker opens"), || {
            on(&a, "/api/pay", &user, &tag)["code"] == "CIRCUIT_OPEN"
        });
        let (_, v) = call(&a, "GET", "/admin/v1/breakers", Some(&basic("vera")), None);
        assert_eq!(v["breakers"][0]["state"], "open", "{v}");
        assert!(
            v["breakers"][0]["open_until_ms"].as_i64().unwrap() > now_ms() + 50_000,
            "{v}"
        );

        // Bad input gets a located 400, never a repair.
        for bad in [json!({"key": ""}), json!({"key": 7}), json!({"keys": "x"})] {
            let (st, v) = call(
                &a,
                "POST",
                "/admin/v1/limits/reset",
                Some(&basic("alice")),
                Some(&bad),
            );
            assert_eq!(st, 400, "{bad}: {v}");
        }
        let (st, _) = call(
            &a,
            "POST",
            "/admin/v1/breakers/open",
            Some(&basic("alice")),
            Some(&json!({"app": "shop", "route": "api/pay"})),
        );
        assert_eq!(st, 400);
        let (st, _) = call(
            &a,
            "POST",
            "/admin/v1/breakers/open",
            Some(&basic("alice")),
            Some(&json!({"app": "shop", "route": "/api/pay", "for_ms": 0})),
        );
        assert_eq!(st, 400);

        // Recorded, newest first, and audited.
        let (_, v) = call(&b, "GET", "/admin/v1/repairs", Some(&basic("vera")), None);
        let kinds: Vec<&str> = v["repairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["breaker", "breaker", "reputation", "limit"], "{v}");
        assert_eq!(v["repairs"][3]["by"], "alice");
        let (_, v) = call(&a, "GET", "/admin/v1/audit", Some(&basic("root")), None);
        let entries = v["entries"].as_array().cloned().unwrap_or_default();
        let actions: Vec<&str> = entries
            .iter()
            .filter_map(|e| e["action"].as_str())
            .collect();
        for want in ["limit.reset", "breaker.close", "breaker.open"] {
            assert!(
                actions.contains(&want),
                "{backend}: no {want} in {actions:?}"
            );
        }
    }
}

/// A claim pool refilled through one instance grants that many more claims on every instance
/// (once on shared Redis, where the stock is split into segments; by each with local state),
/// and nobody who holds a claim gets a second one.
#[test]
fn pool_refills_grant_more_claims_everywhere_and_nobody_twice() {
    let redis = RedisServer::start();
    for backend in ["local", "redis"] {
        let d = temp_dir(&format!("admin-pools-{backend}"));
        let state = match backend {
            // Four segments of one share each: a user whose home is gone walks past others.
            "redis" => format!(
                "[state]\nbackend = \"redis\"\nredis_url = \"{}\"\nredis_prefix = \"pools{}\"\nquota_segments = 4\n",
                redis.url(),
                std::process::id()
            ),
            _ => String::new(),
        };
        let (a, b) = two_instances(
            &d,
            &[(
                "business/prize.rhai",
                rule_file(
                    "prize",
                    "/api/prize",
                    r#"let c = claim("prize", req.user, 4);
if c != "granted" { deny("QUOTA_EXHAUSTED", c) }"#,
                ),
            )],
            &state,
        );
        let tag = format!("pool-{backend}");
        let claim = |e: &Engine, user: &str| {
            let v = on(e, "/api/prize", user, &tag);
            match v["code"].as_str().unwrap() {
                "OK" => "granted".to_string(),
                _ => v["reasons"][0]["message"].as_str().unwrap().to_string(),
            }
        };
        let winners: Vec<String> = (0..4).map(|i| format!("winner-{i}")).collect();
        // Local state: each instance hands out its own stock.
        let both: Vec<&Engine> = if backend == "local" {
            vec![&a, &b]
        } else {
            vec![&a]
        };
        for e in &both {
            for (i, w) in winners.iter().enumerate() {
                let e = if backend == "redis" && i % 2 == 1 {
                    &b
                } else {
                    *e
                };
                assert_eq!(claim(e, w), "granted", "{backend}: {w}");
            }
            assert_eq!(claim(e, "late-1"), "exhausted", "{backend}");
        }
        let view = |e: &Engine| {
            let (st, v) = call(
                e,
                "GET",
                "/admin/v1/pools/prize",
                Some(&basic("vera")),
                None,
            );
            assert_eq!(st, 200, "{v}");
            v
        };
        let v = view(&b);
        assert_eq!(
            (v["claimed"].as_u64(), v["refilled"].as_u64()),
            (Some(4), Some(0)),
            "{v}"
        );
        if backend == "redis" {
            assert_eq!(
                v["segments"].as_array().unwrap().len(),
                5,
                "4 + the refill's: {v}"
            );
        }

        // Bad input and the wrong role change nothing.
        for (who, body, want) in [
            ("vera", json!({"add": 2}), 403),
            ("alice", json!({"add": 0}), 400),
            ("alice", json!({"add": -1}), 400),
            ("alice", json!({"more": 2}), 400),
        ] {
            let (st, v) = call(
                &a,
                "POST",
                "/admin/v1/pools/prize/refill",
                Some(&basic(who)),
                Some(&body),
            );
            assert_eq!(st, want, "{who} {body}: {v}");
        }
        let (st, v) = call(
            &a,
            "POST",
            "/admin/v1/pools/prize/refill",
            Some(&basic("alice")),
            Some(&json!({"add": 2})),
        );
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["repair"]["kind"], "pool", "{v}");

        // b applies it within poll_ms (its own pool with local state, the shared one on Redis).
        within_a_second(&format!("{backend}: b grants a refilled claim"), || {
            claim(&b, "late-1") == "granted"
        });
        if backend == "local" {
            assert_eq!(claim(&a, "late-1"), "granted");
            assert_eq!(claim(&a, "late-2"), "granted");
            assert_eq!(claim(&b, "late-2"), "granted");
        } else {
            assert_eq!(claim(&a, "late-2"), "granted");
        }
        for e in [&a, &b] {
            assert_eq!(claim(e, "late-3"), "exhausted", "{backend}");
            // Nobody twice: the first winners and the refill's winners alike.
            for w in winners
                .iter()
                .map(String::as_str)
                .chain(["late-1", "late-2"])
            {
                assert_eq!(claim(e, w), "duplicate", "{backend}: {w}");
            }
        }
        let v = view(&a);
        assert_eq!(
            (v["claimed"].as_u64(), v["refilled"].as_u64()),
            (Some(6), Some(2)),
            "{v}"
        );
        if backend == "redis" {
            assert_eq!(
                v["segments"][4],
                json!({"segment": "refill", "claimed": 2}),
                "{v}"
            );
        }
        let (_, v) = call(&b, "GET", "/admin/v1/repairs", Some(&basic("vera")), None);
        assert_eq!(v["repairs"][0]["kind"], "pool", "{v}");
        assert_eq!(v["repairs"][0]["add"], 2, "{v}");
    }
}
