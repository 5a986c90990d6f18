//! A fleet: three `rampart serve` instances behind a real nginx upstream (round robin), sharing a
//! 3-master Redis Cluster (anti-replay and rule state, and the control plane) and logging to a
//! ClickHouse cluster (2 shards × 2 replicas with ZooKeeper; each engine writes through another
//! node). What a caller and an operator see must not depend on which instance answers:
//!
//! - a request accepted by one instance is a replay on the next;
//! - a rule set staged through one instance's admin API applies on all three within `poll_ms`,
//!   a canary puts each user on the same arm whichever instance answers, and an approval makes
//!   the new set stable everywhere;
//! - an instance restarted in the middle of traffic lets no replay through and loses no decision
//!   from the log.

mod support;
#[path = "support/users.rs"]
mod users;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{agent, free_port, nonce, now_ms, temp_dir, Call, ClickHouseCluster, Engine, Nginx};
use users::basic;

const SECRET: &str = "fleet-test-secret";
const POLL_MS: u64 = 100;

/// Users: alice (author), bob (approver); password = name + "-pw".
fn users() -> String {
    users::admin_users(&[("alice", "author"), ("bob", "approver")])
}

fn rule(name: &str, body: &str) -> String {
    format!("//! name: {name}\n//! priority: 10\n//! owner: secops\n//! description: fleet test\n{body}\n")
}

fn config(dir: &std::path::Path, name: &str, ch_url: &str, nodes: &str) -> String {
    let rules = dir.join("rules");
    std::fs::create_dir_all(rules.join("edge")).unwrap();
    std::fs::write(rules.join("edge/base.rhai"), rule("base", "()")).unwrap();
    format!(
        "clickhouse_url = \"{ch_url}\"\nclickhouse_database = \"fleet\"\nclickhouse_cluster = \"rampart\"\n\
         spool_dir = \"{}\"\n\
         batch_ms = 100\nretry_ms = 300\n\
         [[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
         [rules]\ndir = \"{}\"\nreload = false\n\
         [state]\nbackend = \"redis\"\nredis_cluster_nodes = [{nodes}]\nredis_prefix = \"fleet\"\n\
         [admin]\ncookie_secure = false\npoll_ms = {POLL_MS}\n{}",
        dir.join(format!("{name}-spool")).display(),
        rules.display(),
        users()
    )
}

/// nginx on `listen`, round robin over `upstreams`; a request an instance refuses to connect
/// is sent to the next one (`proxy_next_upstream error`: nothing reached the refusing instance,
/// so trying the next cannot judge a request twice). Each answer names its instance
/// (`x-upstream`).
fn nginx(dir: &std::path::Path, listen: u16, upstreams: &[String]) -> Nginx {
    let servers: String = upstreams
        .iter()
        .map(|u| format!("    server {u} max_fails=0;\n"))
        .collect();
    Nginx::start(
        dir,
        &format!(
            "upstream rampart {{\n{servers}    keepalive 16;\n  }}\n\
             server {{\n    listen 127.0.0.1:{listen};\n    location / {{\n\
             proxy_pass http://rampart;\n      proxy_http_version 1.1;\n\
             proxy_set_header Connection \"\";\n      proxy_next_upstream error non_idempotent;\n\
             add_header x-upstream $upstream_addr always;\n    }}\n  }}"
        ),
        listen,
    )
}

fn request(tag: &str, i: u64, user: &str) -> Value {
    Call {
        app: "shop",
        secret: SECRET.as_bytes(),
        path: "/api/items",
        body: format!("{{\"i\":{i},\"tag\":\"{tag}\"}}"),
        user,
        ip: "198.51.100.40",
        device: "dev-fleet",
        nonce: nonce(tag, i),
        ts_ms: now_ms(),
        params: Value::Null,
    }
    .json()
}

/// POST /v1/decide through nginx: the answer and the instance that gave it.
fn via(lb: u16, body: &Value) -> (Value, String) {
    let mut r = agent()
        .post(&format!("http://127.0.0.1:{lb}/v1/decide"))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert_eq!(r.status(), 200);
    let up = r
        .headers()
        .get("x-upstream")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    (v, up)
}

fn admin(e: &Engine, method: &str, path: &str, who: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", e.base);
    let a = agent();
    let mut r = match body {
        Some(b) => a
            .post(&url)
            .header("authorization", basic(who))
            .header("content-type", "application/json")
            .send(b.to_string())
            .unwrap(),
        None => {
            assert_eq!(method, "GET");
            a.get(&url)
                .header("authorization", basic(who))
                .call()
                .unwrap()
        }
    };
    let st = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (st, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// How long until every instance judges `user` with `version` (asked directly, not through nginx).
fn until_applied(fleet: &[Engine], user: &str, version: &str, tag: &str) -> Duration {
    let t = Instant::now();
    let mut i = 0;
    for e in fleet {
        loop {
            i += 1;
            let (_, v) = e.decide(&request(tag, i, user));
            if v["ruleset"]["version"] == version {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{} does not apply {version}: {v}",
                e.base
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    t.elapsed()
}

#[test]
fn three_instances_behind_nginx_act_as_one() {
    let cluster = support::RedisCluster::start(3);
    let mut ch = ClickHouseCluster::start(2, 2);
    // Each engine writes through another node (shard 1 replica 1, shard 2 replica 1, shard 1
    // replica 2); the first to start creates the schema on the cluster.
    let ch_urls = [
        ch.node(0, 0).url(),
        ch.node(1, 0).url(),
        ch.node(0, 1).url(),
    ];
    let dir = temp_dir("fleet");
    let nodes = cluster.toml_nodes();
    let names = ["e0", "e1", "e2"];
    let mut fleet: Vec<Engine> = names
        .iter()
        .zip(&ch_urls)
        .map(|(n, u)| Engine::start(&dir, n, &config(&dir, n, u, &nodes)))
        .collect();
    let addrs: Vec<String> = fleet
        .iter()
        .map(|e| e.base.trim_start_matches("http://").to_string())
        .collect();
    let lb = free_port();
    let _nginx = nginx(&dir, lb, &addrs);
    let mut ids: Vec<String> = Vec::new();

    // 1. Replays spread over the instances: each request twice in a row, so round robin sends
    //    the replay to another instance than the original.
    let mut served = std::collections::BTreeSet::new();
    for i in 0..30 {
        let body = request("fleet-r", i, "u-replay");
        let (first, a) = via(lb, &body);
        let (again, b) = via(lb, &body);
        assert_eq!(first["code"], "OK", "{first}");
        assert_eq!(again["code"], "REPLAY_DUPLICATE", "{again}");
        assert_ne!(a, b, "the replay went to the same instance");
        served.insert(a);
        served.insert(b);
        ids.push(first["decision_id"].as_str().unwrap().to_string());
        ids.push(again["decision_id"].as_str().unwrap().to_string());
    }
    assert_eq!(served.len(), 3, "every instance served: {served:?}");

    // 2. A canary staged through e0 applies on every instance within poll_ms, and a user's arm
    //    does not depend on the instance that answers.
    let (st, v) = admin(
        &fleet[0],
        "POST",
        "/admin/v1/rulesets",
        "alice",
        Some(json!({"files": {
            "edge/base.rhai": rule("base", "()"),
            "edge/fleet-block.rhai": rule("fleet-block", r#"if req.path == "/api/blocked" { deny("fleet test") }"#),
        }, "message": "fleet test"})),
    );
    assert!(st == 200 || st == 201, "{st} {v}");
    let cand = v["version"].as_str().unwrap().to_string();
    let (st, v) = admin(
        &fleet[0],
        "POST",
        "/admin/v1/rollout",
        "alice",
        Some(json!({"version": cand, "stage": "canary", "percent": 30.0})),
    );
    assert_eq!(st, 200, "{v}");
    // Some user in the canary: found through e0, which applied the change itself.
    let canary_user = (0..200)
        .map(|u| format!("user-{u}"))
        .find(|u| {
            let (_, v) = fleet[0].decide(&request("fleet-find", 0, u));
            v["ruleset"]["arm"] == "canary"
        })
        .expect("a canary user among 200");
    let took = until_applied(&fleet, &canary_user, &cand, "fleet-c");
    println!(
        "canary staged on e0: applied by all three instances {} ms later (poll_ms = {POLL_MS})",
        took.as_millis()
    );
    assert!(
        took < Duration::from_millis(POLL_MS * 10),
        "the canary took {took:?} to reach every instance"
    );
    let arms = |round: u64| -> Vec<(String, String)> {
        (0..90)
            .map(|u| {
                let (v, up) = via(
                    lb,
                    &request(&format!("fleet-a{round}"), u, &format!("user-{u}")),
                );
                assert_eq!(v["code"], "OK", "{v}");
                (v["ruleset"]["arm"].as_str().unwrap().to_string(), up)
            })
            .collect()
    };
    let first = arms(1);
    // One request more shifts round robin: the same user is now answered by another instance.
    via(lb, &request("fleet-shift", 0, "u-shift"));
    let second = arms(2);
    for (u, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_ne!(a.1, b.1, "user-{u} was answered by the same instance twice");
        assert_eq!(
            a.0, b.0,
            "user-{u}: arm {} on {} but {} on {}",
            a.0, a.1, b.0, b.1
        );
    }
    let in_canary = first.iter().filter(|(a, _)| a == "canary").count();
    assert!(
        (10..=45).contains(&in_canary),
        "{in_canary} of 90 users in a 30% canary"
    );

    // Approved through e2 by someone else: stable on every instance.
    let (st, v) = admin(
        &fleet[2],
        "POST",
        "/admin/v1/rollout/approve",
        "bob",
        Some(json!({"version": cand})),
    );
    assert_eq!(st, 200, "{v}");
    let took = until_applied(&fleet, "u-stable", &cand, "fleet-s");
    println!(
        "approved on e2: stable on all three {} ms later",
        took.as_millis()
    );
    // The new stable set refuses /api/blocked, whichever instance answers.
    let mut who = std::collections::BTreeSet::new();
    for i in 0..3 {
        let body = Call {
            app: "shop",
            secret: SECRET.as_bytes(),
            path: "/api/blocked",
            body: String::new(),
            user: "u-blocked",
            ip: "198.51.100.41",
            device: "",
            nonce: nonce("fleet-b", i),
            ts_ms: now_ms(),
            params: Value::Null,
        }
        .json();
        let (v, up) = via(lb, &body);
        assert_eq!(
            (v["action"].as_str(), v["rule"].as_str()),
            (Some("deny"), Some("fleet-block")),
            "{up}: {v}"
        );
        ids.push(v["decision_id"].as_str().unwrap().to_string());
        who.insert(up);
    }
    assert_eq!(who.len(), 3, "{who:?}");

    // 3. e1 restarted in the middle of traffic: no replay passes, no decision is lost.
    let stop = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicU64::new(0));
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, seq, seen) = (stop.clone(), seq.clone(), seen.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = seq.fetch_add(1, Ordering::Relaxed);
                    let body = request("fleet-k", i, "u-restart");
                    let (first, _) = via(lb, &body);
                    let (again, _) = via(lb, &body);
                    let mut s = seen.lock().unwrap();
                    for v in [&first, &again] {
                        s.push((
                            v["code"].as_str().unwrap_or("?").to_string(),
                            v["decision_id"].as_str().unwrap_or("").to_string(),
                        ));
                    }
                    assert_eq!(first["code"], "OK", "{first}");
                    assert_eq!(again["code"], "REPLAY_DUPLICATE", "{again}");
                    drop(s);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let port: u16 = addrs[1].rsplit(':').next().unwrap().parse().unwrap();
    assert!(fleet[1].stop().success(), "e1 did not stop cleanly");
    std::thread::sleep(Duration::from_millis(300));
    fleet[1] = Engine::start_at(
        &dir,
        "e1",
        &config(&dir, "e1", &ch_urls[1], &nodes),
        &[],
        port,
    );
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a traffic thread saw a wrong answer");
    }
    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 40, "too little traffic: {}", seen.len());
    ids.extend(seen.iter().map(|(_, id)| id.clone()));
    drop(seen);

    // Every decision answered through nginx is in the log exactly once.
    for e in &mut fleet {
        assert!(e.stop().success());
    }
    let list = ids
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(",");
    // Rows reach their shard through the node each engine wrote to (Distributed inserts are
    // forwarded in the background): wait until they all arrived.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut rows, mut distinct);
    loop {
        let n = ch.node(1, 1);
        rows = n.count(&format!(
            "SELECT count() FROM fleet.rampart_decisions FINAL WHERE decision_id IN ({list})"
        ));
        distinct = n.count(&format!(
            "SELECT uniqExact(decision_id) FROM fleet.rampart_decisions WHERE decision_id IN ({list})"
        ));
        if (rows, distinct) == (ids.len() as u64, ids.len() as u64) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    println!(
        "{} decisions answered through nginx; {rows} rows in the log",
        ids.len()
    );
    assert_eq!((rows, distinct), (ids.len() as u64, ids.len() as u64));
}
