//! The decision log in a real ClickHouse (the Debian `clickhouse-server`, 18.16): every decision
//! served is exactly one row — across a 30-second ClickHouse outage, across an engine restart with
//! a non-empty spool — and odd caller values never fail a batch.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{now_ms, temp_dir, Call, ClickHouseServer, Engine};

const SECRET: &str = "clickhouse-test-secret";

/// The engine's decision-log keys (appended to the `[decision_log]` table the harness writes).
fn start_engine(ch: &ClickHouseServer, dir: &Path, name: &str, db: &str) -> Engine {
    Engine::start(dir, name, &engine_config(ch, dir, db))
}

fn engine_config(ch: &ClickHouseServer, dir: &Path, db: &str) -> String {
    format!(
        "clickhouse_url = \"{}\"\nclickhouse_database = \"{db}\"\nspool_dir = \"{}\"\n\
         batch_ms = 100\nretry_ms = 300\ninsert_timeout_ms = 2000\n\
         [[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
         [[apps]]\nid = \"kiosk\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
         [rules]\ndefaults = false\n",
        ch.url(),
        dir.join("spool").display()
    )
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn request(tag: &str) -> Value {
    let i = SEQ.fetch_add(1, Ordering::Relaxed);
    Call {
        app: "shop",
        secret: SECRET.as_bytes(),
        path: "/api/x",
        body: format!("{{\"i\":{i}}}"),
        user: "u",
        ip: "198.51.100.9",
        device: "d",
        nonce: format!("{tag}-{}-{i:012}", std::process::id()),
        ts_ms: now_ms(),
        params: Value::Null,
    }
    .json()
}

/// Sends `n` decisions in batches of 100 from 4 threads; the answers' largest `latency_us`.
fn serve(engine: &Engine, n: u64, tag: &str) -> u64 {
    let url = format!("{}/v1/decide/batch", engine.base);
    let left = AtomicU64::new(n / 100);
    let worst = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                    .is_ok()
                {
                    let batch: Vec<Value> = (0..100).map(|_| request(tag)).collect();
                    let (st, v) = support::post(&url, &Value::Array(batch));
                    assert_eq!(st, 200, "{v}");
                    let answers = v
                        .as_array()
                        .or_else(|| v["decisions"].as_array())
                        .expect("batch answers");
                    assert_eq!(answers.len(), 100);
                    for a in answers {
                        assert_eq!(a["code"], "OK", "{a}");
                        worst.fetch_max(a["latency_us"].as_u64().unwrap(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    worst.into_inner()
}

fn wait_for_rows(ch: &ClickHouseServer, db: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = ch.count(&format!(
            "SELECT uniqExact(decision_id) FROM {db}.rampart_decisions"
        ));
        if got == n {
            return;
        }
        assert!(got < n, "more distinct decisions than served: {got} > {n}");
        assert!(Instant::now() < deadline, "only {got} of {n} rows arrived");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_decision_is_exactly_one_row_across_a_clickhouse_outage() {
    let mut ch = ClickHouseServer::start();
    let dir = temp_dir("ch-outage");
    ch.query("CREATE DATABASE IF NOT EXISTS outage").unwrap();
    let engine = start_engine(&ch, &dir, "outage", "outage");

    let before = serve(&engine, 30_000, "up");
    ch.stop();
    let down = Instant::now();
    // Decisions keep being served while ClickHouse is away; none of them waits for it.
    let mut during_worst = 0;
    let mut during = 0;
    while down.elapsed() < Duration::from_secs(30) {
        if during < 40_000 {
            during_worst = during_worst.max(serve(&engine, 5_000, "down"));
            during += 5_000;
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert_eq!(during, 40_000);
    assert!(engine.metric("rampart_decision_log_spool_rows") > 0.0);
    assert!(
        during_worst < 1_000_000,
        "a decision waited {during_worst} µs while ClickHouse was down"
    );
    ch.restart();
    let after = serve(&engine, 30_000, "back");

    wait_for_rows(&ch, "outage", 100_000);
    assert_eq!(
        ch.count("SELECT count() FROM outage.rampart_decisions FINAL"),
        100_000
    );
    assert_eq!(
        engine.metric("rampart_decision_log_rows_dropped_total"),
        0.0
    );
    assert_eq!(
        engine.metric("rampart_decision_log_spool_dropped_rows_total"),
        0.0
    );
    assert!(engine.metric("rampart_decision_log_unspooled_rows_total") > 0.0);
    // The rollup saw them too.
    assert!(ch.count("SELECT sum(decisions) FROM outage.rampart_decisions_minute") >= 100_000);
    eprintln!(
        "largest decision latency: {before} µs before, {during_worst} µs during, {after} µs after the outage"
    );
}

#[test]
fn an_engine_restarted_with_a_full_spool_drains_it_without_duplicates() {
    let mut ch = ClickHouseServer::start();
    let dir = temp_dir("ch-restart");
    ch.query("CREATE DATABASE IF NOT EXISTS restart").unwrap();
    let mut engine = start_engine(&ch, &dir, "restart-1", "restart");
    serve(&engine, 2_000, "first");
    wait_for_rows(&ch, "restart", 2_000);

    ch.stop();
    serve(&engine, 5_000, "spooled");
    assert!(engine.stop().success());
    let spooled = std::fs::read_dir(dir.join("spool"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".rsp")
        })
        .count();
    assert!(spooled > 0, "the stopped engine left its rows in the spool");

    ch.restart();
    let engine = start_engine(&ch, &dir, "restart-2", "restart");
    wait_for_rows(&ch, "restart", 7_000);
    // Not only distinct: no row twice.
    assert_eq!(
        ch.count("SELECT count() FROM restart.rampart_decisions"),
        7_000
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.metric("rampart_decision_log_spool_rows") > 0.0 {
        assert!(Instant::now() < deadline, "spool not drained");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn odd_caller_values_are_cut_and_never_fail_a_batch() {
    let ch = ClickHouseServer::start();
    let dir = temp_dir("ch-odd");
    ch.query("CREATE DATABASE IF NOT EXISTS odd").unwrap();
    let engine = start_engine(&ch, &dir, "odd", "odd");
    let mut batch = Vec::new();
    for (i, ua) in [
        "x".repeat(10_000),
        "tab\tnewline\ncarriage\rnul\u{0}bell\u{7}".to_string(),
        "emoji 🚀 and 漢字 and RTL \u{202e}".to_string(),
        "é".repeat(400),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = request("odd");
        r["client"]["user_agent"] = Value::String(ua);
        r["client"]["isp"] = Value::String("i".repeat(5_000));
        r["user_id"] = Value::String(format!("user\u{1}{i}"));
        batch.push(r);
    }
    let (st, v) = support::post(
        &format!("{}/v1/decide/batch", engine.base),
        &Value::Array(batch),
    );
    assert_eq!(st, 200, "{v}");
    wait_for_rows(&ch, "odd", 4);
    assert_eq!(
        ch.count("SELECT max(length(user_agent)) FROM odd.rampart_decisions"),
        512
    );
    assert_eq!(
        ch.count("SELECT max(length(isp)) FROM odd.rampart_decisions"),
        256
    );
    // Control characters are replaced, and values are cut at a character boundary: every stored
    // value is valid UTF-8 without C0 controls.
    let hex = ch
        .query("SELECT hex(user), hex(user_agent) FROM odd.rampart_decisions FORMAT TabSeparated")
        .unwrap();
    for field in hex.split(['\t', '\n']).filter(|f| !f.is_empty()) {
        let bytes: Vec<u8> = (0..field.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&field[i..i + 2], 16).unwrap())
            .collect();
        let text = String::from_utf8(bytes).expect("valid UTF-8");
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
    }
}

/// Every decision in the range, page by page through the explorer's cursor.
fn all_pages(engine: &Engine, filter: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let (st, v) = engine.admin_get(&format!(
            "/admin/v1/decisions?from=0&limit=1000{filter}{cursor}"
        ));
        assert_eq!(st, 200, "{v}");
        out.extend(v["decisions"].as_array().unwrap().iter().cloned());
        match v["next"].as_str() {
            Some(n) => cursor = format!("&cursor={n}"),
            None => return out,
        }
    }
}

/// The explorer and stats answer the same way from ClickHouse and from the local log.
fn check_queries(engine: &Engine, served: usize) {
    let rows = all_pages(engine, "");
    assert_eq!(rows.len(), served);
    let ids: std::collections::HashSet<&str> = rows
        .iter()
        .map(|r| r["decision_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), served, "pages never repeat a decision");
    assert!(rows
        .windows(2)
        .all(|w| w[0]["time_ms"].as_i64() >= w[1]["time_ms"].as_i64()));
    let r = &rows[0];
    assert_eq!(r["app"], "shop");
    // Every row names the signing key its signature matched (migration 0005 on ClickHouse).
    assert!(rows.iter().all(|r| r["key_id"] == "default"), "{r}");
    let (st, by_key) = engine.admin_get("/admin/v1/stats?from=0&app=shop&by=key_id");
    assert_eq!(st, 200, "{by_key}");
    assert_eq!(by_key["breakdown"][0]["key"], "default", "{by_key}");
    assert_eq!(by_key["breakdown"][0]["n"].as_u64(), Some(served as u64));
    // No request met a challenge: the `challenge` column (migration 0006) is empty in every row.
    assert!(rows.iter().all(|r| r["challenge"] == ""), "{r}");
    let (st, by_ch) = engine.admin_get("/admin/v1/stats?from=0&app=shop&by=challenge");
    assert_eq!(st, 200, "{by_ch}");
    assert_eq!(by_ch["breakdown"][0]["key"], "", "{by_ch}");
    assert_eq!(by_ch["breakdown"][0]["n"].as_u64(), Some(served as u64));
    assert!(all_pages(engine, "&challenge=solved").is_empty());
    assert_eq!(r["action"], "allow");
    assert!(r["reasons"].is_array() && r["degraded"].is_boolean(), "{r}");
    assert!(
        r["request"]["headers"].is_object(),
        "the request is recorded: {r}"
    );
    // A backtest over the same rows, of a set that would refuse none of them.
    let files = serde_json::json!({"files": {"edge/none.rhai":
        "//! name: none\n//! priority: 1\n//! owner: t\n//! description: d\nif req.path == \"/never\" { deny(\"x\") }\n"}});
    let (st, up) = engine.admin_post("/admin/v1/rulesets", &files);
    assert!(st == 201 || st == 200, "{up}");
    let (st, bt) = engine.admin_post(
        &format!(
            "/admin/v1/rulesets/{}/backtest",
            up["version"].as_str().unwrap()
        ),
        &serde_json::json!({"hours": 1}),
    );
    assert_eq!(st, 200, "{bt}");
    assert_eq!(bt["changed"], 0, "{bt}");
    assert_eq!(bt["rows"].as_u64(), Some(served as u64), "{bt}");
    assert_eq!(bt["unrecorded"], 0);
    assert_eq!(all_pages(engine, "&action=deny").len(), 0);
    assert_eq!(all_pages(engine, "&app=other").len(), 0);
    // A `?` in a value is a literal, not a query argument of the ClickHouse client.
    assert_eq!(
        all_pages(engine, "&user=who%3F&route=%2Fa%3Fb%3D%3F").len(),
        0
    );
    // Quotes and backslashes in values are the values' own (the client escapes what it binds).
    assert_eq!(
        all_pages(engine, "&user=o%27brien%5C&app=sh%27op%5C%27").len(),
        0
    );
    let (st, v) = engine.admin_get("/admin/v1/stats?from=0&by=code");
    assert_eq!(st, 200, "{v}");
    let total: u64 = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["n"].as_u64().unwrap())
        .sum();
    assert!(total >= served as u64, "{v}");
    assert_eq!(v["breakdown"][0]["key"], "OK", "{v}");
    assert!(v["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{v}");
    // Bad input is a clear 400, never a 5xx.
    for bad in [
        "limit=0",
        "action=maybe",
        "by=password",
        "cursor=x",
        "from=5&to=1",
        "nope=1",
    ] {
        let (st, v) = engine.admin_get(&format!("/admin/v1/decisions?{bad}"));
        let (st2, _) = engine.admin_get(&format!("/admin/v1/stats?{bad}"));
        assert_eq!((st, st2), (400, 400), "{bad}: {v}");
        assert_eq!(v["error"]["code"], "INVALID_QUERY");
    }
}

/// Clients of one app and device type whose clocks are 2 minutes slow (window ±60 s): 30 Android
/// devices of `shop`, 20 iOS devices of `shop`, 10 web clients of `kiosk`. Returns how many.
fn skewed_traffic(engine: &Engine) -> usize {
    let mut n = 0;
    for (app, device_type, count) in [
        ("shop", "android", 30),
        ("shop", "ios", 20),
        ("kiosk", "web", 10),
    ] {
        for i in 0..count {
            let mut call = Call {
                app,
                secret: SECRET.as_bytes(),
                path: "/api/x",
                body: String::new(),
                user: "u",
                ip: "198.51.100.7",
                device: if i == 0 { "dev-first" } else { "dev-other" },
                nonce: format!("skew-{app}-{device_type}-{}-{i:06}", std::process::id()),
                ts_ms: now_ms() - 120_000,
                params: Value::Null,
            }
            .json();
            call["client"]["device_type"] = device_type.into();
            let (st, v) = engine.decide(&call);
            assert_eq!(st, 200, "{v}");
            assert_eq!(
                (v["code"].as_str(), v["status"].as_u64()),
                (Some("TIMESTAMP_SKEW"), Some(401)),
                "{v}"
            );
            n += 1;
        }
    }
    n
}

/// Threat 8: mass rejection from clock skew is diagnosable by app and device, in the metrics, the
/// explorer and the stats (after `skewed_traffic`, once its rows are in the log).
fn check_skew_diagnosis(engine: &Engine) {
    let skew = |filter: &str| all_pages(engine, &format!("&code=TIMESTAMP_SKEW{filter}"));
    assert_eq!(skew("").len(), 60);
    let shop = skew("&app=shop");
    assert_eq!(shop.len(), 50);
    assert!(shop.iter().all(|r| r["app"] == "shop"
        && r["reasons"][0]["skew_ms"]
            .as_i64()
            .is_some_and(|s| s < -60_000)));
    assert_eq!(skew("&app=shop&device_type=android").len(), 30);
    assert_eq!(skew("&device_type=web").len(), 10);
    let first = skew("&device_id=dev-first");
    assert_eq!(first.len(), 3, "one device per population");
    assert!(
        first.iter().all(|r| r["device_id"] == "dev-first"),
        "{first:?}"
    );
    let (st, v) =
        engine.admin_get("/admin/v1/stats?from=0&code=TIMESTAMP_SKEW&app=shop&by=device_type");
    assert_eq!(st, 200, "{v}");
    let by: std::collections::HashMap<&str, u64> = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["key"].as_str().unwrap(), b["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(by, [("android", 30), ("ios", 20)].into(), "{v}");
    let (st, v) =
        engine.admin_get("/admin/v1/stats?from=0&code=TIMESTAMP_SKEW&device_id=dev-first&by=app");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["breakdown"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(
        engine.metric("rampart_timestamp_skew_total{app=\"shop\",direction=\"behind\"}"),
        50.0
    );
    assert_eq!(
        engine.metric("rampart_timestamp_skew_total{app=\"kiosk\",direction=\"behind\"}"),
        10.0
    );
}

#[test]
fn the_explorer_and_stats_read_clickhouse() {
    let ch = ClickHouseServer::start();
    let dir = temp_dir("ch-query");
    ch.query("CREATE DATABASE IF NOT EXISTS query").unwrap();
    let engine = start_engine(&ch, &dir, "query", "query");
    serve(&engine, 2_500, "q");
    wait_for_rows(&ch, "query", 2_500);
    check_queries(&engine, 2_500);
    let skewed = skewed_traffic(&engine);
    wait_for_rows(&ch, "query", 2_500 + skewed as u64);
    check_skew_diagnosis(&engine);
    // The engine migrated at start; `rampart migrate` finds nothing left to do.
    let out = std::process::Command::new(support::bin())
        .args([
            "migrate",
            "--config",
            dir.join("query.toml").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("up to date"));
    assert_eq!(
        ch.count("SELECT count() FROM query.rampart_migrations"),
        crate_migrations()
    );
}

#[test]
fn the_explorer_and_stats_read_the_local_log() {
    let dir = temp_dir("local-query");
    let engine = Engine::start(
        &dir,
        "local",
        &format!(
            "max_file_bytes = 262144\n[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
             [[apps]]\nid = \"kiosk\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
             [rules]\ndefaults = false\n"
        ),
    );
    serve(&engine, 2_500, "l");
    // The local log is written in the background: wait until every row is there.
    let deadline = Instant::now() + Duration::from_secs(20);
    while all_pages(&engine, "").len() < 2_500 {
        assert!(Instant::now() < deadline, "local log incomplete");
        std::thread::sleep(Duration::from_millis(100));
    }
    check_queries(&engine, 2_500);
    let skewed = skewed_traffic(&engine);
    while all_pages(&engine, "").len() < 2_500 + skewed {
        assert!(
            Instant::now() < deadline + Duration::from_secs(20),
            "local log incomplete"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    check_skew_diagnosis(&engine);
}

/// Threat 3 by mistake: two replicas left on `[state] backend = "local"`. A request replayed on
/// the other replica passes (that is the danger); each finds the other in the shared decision log
/// and says so, in a gauge and a warning. A second engine on the same log directory is refused.
#[test]
fn replicas_on_local_state_find_each_other_in_the_shared_log() {
    let ch = ClickHouseServer::start();
    let dir = temp_dir("ch-peers");
    ch.query("CREATE DATABASE IF NOT EXISTS peers").unwrap();
    let cfg = format!(
        "{}[state]\nbackend = \"local\"\npeer_check_ms = 300\n",
        engine_config(&ch, &dir, "peers")
    )
    .replace("spool\"", "spool-NAME\"");
    let a = Engine::start(&dir, "peer-a", &cfg.replace("NAME", "a"));
    let b = Engine::start(&dir, "peer-b", &cfg.replace("NAME", "b"));
    let peers = |e: &Engine| e.metric("rampart_local_state_peers");
    assert_eq!((peers(&a), peers(&b)), (0.0, 0.0));

    let r = request("peer");
    assert_eq!(a.decide(&r).1["code"], "OK");
    assert_eq!(a.decide(&r).1["code"], "REPLAY_DUPLICATE");
    assert_eq!(
        b.decide(&r).1["code"],
        "OK",
        "per-instance state: the other replica lets the replay through"
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    while peers(&a) != 1.0 || peers(&b) != 1.0 {
        assert!(
            Instant::now() < deadline,
            "peers not found: a {} b {}",
            peers(&a),
            peers(&b)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let said = std::fs::read_to_string(dir.join("peer-a.stderr")).unwrap();
    assert!(
        said.contains("other instances serve the same apps") && said.contains("peer-b"),
        "{said}"
    );

    // One log directory, one engine.
    let (code, err) = Engine::refused(&dir, "peer-a", &cfg.replace("NAME", "a2"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("already in use by another rampart process"),
        "{err}"
    );
}

fn crate_migrations() -> u64 {
    std::fs::read_dir(format!(
        "{}/../../dashboards/clickhouse/migrations",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap()
    .count() as u64
}
