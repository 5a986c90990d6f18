//! Proof-of-work challenges over HTTP on two instances sharing Redis (contract v1.1): a challenge
//! issued by one instance is solved on the other (they share the MAC key through the control
//! store), its solution is good once across both, the clearance passes on either, and forward-auth
//! takes it as the `rampart_clearance` cookie and hands it out as one.

mod support;

use serde_json::{json, Value};
use support::{agent, now_ms, temp_dir, Call, Engine, RedisServer};

const SECRET: &[u8] = b"challenge-http-secret";

fn rules(dir: &std::path::Path) -> std::path::PathBuf {
    let r = dir.join("rules");
    for t in ["edge", "gateway", "business"] {
        std::fs::create_dir_all(r.join(t)).unwrap();
    }
    std::fs::write(
        r.join("edge/pow.rhai"),
        "//! name: login-pow\n//! priority: 10\n//! owner: t\n//! description: t\n\
         if req.path == \"/login\" && !req.cleared { challenge(\"prove it\", #{difficulty: 8}) }\n",
    )
    .unwrap();
    r
}

fn call(e: &Engine, ip: &str, n: u64, extra: &[(&str, &str)]) -> Value {
    let mut body = Call {
        app: "shop",
        secret: SECRET,
        path: "/login",
        body: String::new(),
        user: "",
        ip,
        device: "",
        nonce: support::nonce("pow", n),
        ts_ms: now_ms(),
        params: json!({}),
    }
    .json();
    body["client"].as_object_mut().unwrap().remove("device_id");
    for (k, v) in extra {
        body["request"]["headers"][*k] = json!(v);
    }
    let (status, v) = e.decide(&body);
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn a_challenge_is_solved_once_across_instances_and_its_clearance_passes_everywhere() {
    let redis = RedisServer::start();
    let d = temp_dir("challenge-http");
    let cfg = format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"{}\"\nwindow_ms = 60000\n\
         [state]\nbackend = \"redis\"\nredis_url = \"{}\"\n\
         [rules]\ndir = \"{}\"\n",
        std::str::from_utf8(SECRET).unwrap(),
        redis.url(),
        rules(&d).display()
    );
    let a = Engine::start(&d, "a", &cfg);
    let b = Engine::start(&d, "b", &cfg);
    let ip = "203.0.113.50";

    let v = call(&a, ip, 1, &[]);
    assert_eq!(
        (v["action"].as_str(), v["code"].as_str()),
        (Some("challenge"), Some("RULE_CHALLENGE")),
        "{v}"
    );
    let ch = &v["challenge"];
    assert_eq!(
        (
            ch["kind"].as_str(),
            ch["algorithm"].as_str(),
            ch["difficulty"].as_u64()
        ),
        (Some("pow"), Some("sha256"), Some(8))
    );
    let token = ch["token"].as_str().unwrap();
    assert!(ch["expires_ms"].as_i64().unwrap() > now_ms());
    let solution = format!("{token}:{}", rampart_core::challenge::solve(token, 8));

    // Solved on the other instance: the MAC key is shared.
    let v = call(&b, ip, 2, &[("x-rampart-solution", &solution)]);
    assert_eq!(
        (v["code"].as_str(), v["cleared"].as_bool()),
        (Some("OK"), Some(true)),
        "{v}"
    );
    let clearance = v["clearance"]["token"].as_str().unwrap().to_string();

    // Used once, across instances.
    let v = call(&a, ip, 3, &[("x-rampart-solution", &solution)]);
    assert_eq!(
        (v["code"].as_str(), v["status"].as_u64()),
        (Some("CHALLENGE_FAILED"), Some(403)),
        "{v}"
    );
    assert!(
        v["reasons"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("reused"),
        "{v}"
    );
    assert_ne!(v["cleared"], true, "a refused solution clears nothing: {v}");

    // The clearance passes on both; from another address it does not.
    for (e, n) in [(&a, 4), (&b, 5)] {
        let v = call(e, ip, n, &[("x-rampart-clearance", &clearance)]);
        assert_eq!(v["code"], "OK", "{v}");
    }
    let v = call(
        &a,
        "198.51.100.77",
        6,
        &[("x-rampart-clearance", &clearance)],
    );
    assert_eq!(v["code"], "CHALLENGE_FAILED", "{v}");

    // Forward-auth: the challenge comes in headers, the clearance as a cookie both ways.
    let authz = |extra: &[(&str, &str)], n: u64| {
        let h = rampart_core::replay::sign::sign(
            SECRET,
            &rampart_core::replay::sign::ToSign {
                app: "shop",
                method: "GET",
                path: "/login",
                query: "",
                body: b"",
                timestamp_ms: now_ms(),
                nonce: &support::nonce("authz", n),
            },
        );
        let mut rq = agent()
            .get(&format!("{}/v1/authz", a.base))
            .header("x-app", "shop")
            .header("x-original-method", "GET")
            .header("x-original-uri", "/login")
            .header("x-timestamp", &h.timestamp)
            .header("x-nonce", &h.nonce)
            .header("x-signature", &h.signature);
        for (k, v) in extra {
            rq = rq.header(*k, *v);
        }
        rq.call().unwrap()
    };
    // Loopback is a trusted proxy by default: the client address is X-Real-IP.
    let r = authz(&[("x-real-ip", ip)], 7);
    assert_eq!(r.status().as_u16(), 401);
    let token = r.headers()["x-rampart-challenge"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        r.headers()["x-rampart-challenge-difficulty"]
            .to_str()
            .unwrap(),
        "8"
    );
    let sol = format!("{token}:{}", rampart_core::challenge::solve(&token, 8));
    let r = authz(&[("x-real-ip", ip), ("x-rampart-solution", &sol)], 8);
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with("rampart_clearance=c1.") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let value = cookie.split(';').next().unwrap().to_string();
    let r = authz(&[("x-real-ip", ip), ("cookie", &value)], 9);
    assert_eq!(r.status().as_u16(), 200);
    let r = authz(&[("x-real-ip", "198.51.100.78"), ("cookie", &value)], 10);
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        r.headers()["x-rampart-code"].to_str().unwrap(),
        "CHALLENGE_FAILED"
    );

    // The decision log says where each request stood (`challenge`: issued, solved, cleared),
    // the explorer filters and breaks down by it, and the solve time is a histogram.
    let rows = |e: &Engine, state: &str| -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (st, v) = e.admin_get(&format!("/admin/v1/decisions?from=0&challenge={state}"));
            assert_eq!(st, 200, "{v}");
            let found = v["decisions"].as_array().cloned().unwrap_or_default();
            if !found.is_empty() || std::time::Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let solved = rows(&b, "solved");
    assert_eq!(solved.len(), 1, "{solved:?}");
    assert_eq!(solved[0]["code"], "OK");
    let cleared = rows(&b, "cleared");
    assert_eq!(cleared.len(), 1, "the clearance used on b: {cleared:?}");
    let issued = rows(&a, "issued");
    assert!(
        issued.iter().all(|r| r["action"] == "challenge"),
        "{issued:?}"
    );
    assert_eq!(
        issued.len(),
        2,
        "the decide and the authz challenges: {issued:?}"
    );
    let (st, by) = a.admin_get("/admin/v1/stats?from=0&app=shop&by=challenge");
    assert_eq!(st, 200, "{by}");
    let n = |k: &str| {
        by["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["key"] == k)
            .and_then(|b| b["n"].as_u64())
            .unwrap_or(0)
    };
    // On a: two challenges, the forward-auth solution, and two clearances (the reused solution
    // and the clearance from another address were refused, and cleared nothing).
    assert_eq!((n("issued"), n("solved"), n("cleared")), (2, 1, 2), "{by}");
    let m = b.metrics();
    assert!(
        m.lines()
            .any(|l| l == "rampart_challenge_solve_seconds_count 1"),
        "{m}"
    );
}
