//! Shared state on real Redis (DESIGN §2, issue "distributed state"): several `rampart serve`
//! processes behind one Redis — a single node and a 3-master cluster — act as one engine.
//!
//! - a nonce used on one instance is a replay on every other one, in both nonce modes;
//! - of many identical requests racing over the instances, exactly one passes;
//! - no gap at either window edge across instances;
//! - 200 concurrent claimants for 100 prizes over 3 instances: exactly 100 winners, nobody twice;
//! - rate limits, counters and distinct counts are shared; counter reads (plain `HMGET`s computed
//!   by the engine) answer what the in-process limiter answers, also batched over cluster nodes;
//! - Redis killed mid-load: callers see the declared policy (never a 5xx, never a crash), the local
//!   fallback keeps catching an instance's own replays, and service resumes when Redis returns.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rampart::redis_state::{Redis, RedisCounters, RedisLimiter, RedisSettings};
use rampart_core::store::limits::{LimiterStore, LocalLimiter};
use serde_json::Value;
use support::{agent, nonce, now_ms, temp_dir, Call, Engine, RedisCluster, RedisServer};

const SECRET: &str = "redis-test-secret";
/// The window of the test app: small, so the window-edge test waits little.
const WINDOW_MS: i64 = 1000;

fn rule(dir: &Path, path: &str, meta: &str, body: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let name = path.rsplit('/').next().unwrap().trim_end_matches(".rhai");
    std::fs::write(
        p,
        format!("//! name: {name}\n//! priority: 10\n//! owner: test\n//! description: test\n{meta}{body}\n"),
    )
    .unwrap();
}

fn rules(dir: &Path) -> PathBuf {
    let r = dir.join("rules");
    rule(
        &r,
        "gateway/user-rate.rhai",
        "//! routes: /api/rate\n",
        r#"if !rate_limit("user:" + req.user, 5, 5) { deny("RATE_LIMITED", "too many") }"#,
    );
    rule(
        &r,
        "gateway/slow-rate.rhai",
        "//! routes: /api/slow-rate\n",
        r#"if !rate_limit("slow:" + req.user, 0.001, 3) { deny("RATE_LIMITED", "slow down") }"#,
    );
    // Two limits on one key (bursts of 2 and 3), planned into one script.
    rule(
        &r,
        "gateway/twice-a.rhai",
        "//! routes: /api/twice\n",
        r#"if !rate_limit("tw:" + req.user, 0.001, 2) { deny("RATE_LIMITED", "burst of 2") }"#,
    );
    rule(
        &r,
        "gateway/twice-b.rhai",
        "//! routes: /api/twice\n",
        r#"if !rate_limit("tw:" + req.user, 0.001, 3) { deny("RATE_LIMITED", "burst of 3") }"#,
    );
    rule(
        &r,
        "edge/ip-flood.rhai",
        "//! routes: /api/edge-rate\n",
        r#"if !rate_limit_ip(req, 2, 2) { deny("RATE_LIMITED", "ip flood") }"#,
    );
    rule(
        &r,
        "business/orders.rhai",
        "//! routes: /api/orders\n",
        r#"if count("orders:" + req.user, 60000) > 3 { deny("too many orders") }"#,
    );
    rule(
        &r,
        "business/device.rhai",
        "//! routes: /api/signup\n",
        r#"if distinct("dev:" + req.device_id, req.user, 60000) > 2 { deny("device farm") }"#,
    );
    rule(
        &r,
        "business/lottery.rhai",
        "//! routes: /api/lottery\n",
        r#"let c = claim("prize-" + req.param("event"), req.user, 100);
if c == "duplicate" { deny("QUOTA_EXHAUSTED", "duplicate") }
else if c == "exhausted" { deny("QUOTA_EXHAUSTED", "exhausted") }"#,
    );
    r
}

fn config(rules: &Path, state: &str) -> String {
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = {WINDOW_MS}\n\
         [rules]\ndir = \"{}\"\nreload = false\n\
         [state]\nbackend = \"redis\"\nclock_margin_ms = 0\n{state}",
        rules.display()
    )
}

/// One engine on the Redis at `url`, in nonce mode `mode`, with its own prefix (`name`) and call
/// timeout.
fn engine_in_mode(
    dir: &Path,
    rules: &Path,
    name: &str,
    url: &str,
    mode: &str,
    timeout_ms: u64,
) -> Engine {
    let state = format!(
        "redis_url = \"{url}\"\nnonce_mode = \"{mode}\"\nredis_prefix = \"{name}\"\n\
         redis_timeout_ms = {timeout_ms}\n"
    );
    Engine::start(dir, name, &config(rules, &state))
}

fn call(path: &str, body: &str, user: &str, nonce: String) -> Call<'static> {
    Call {
        app: "shop",
        secret: SECRET.as_bytes(),
        path: Box::leak(path.to_string().into_boxed_str()),
        body: body.to_string(),
        user: Box::leak(user.to_string().into_boxed_str()),
        ip: "198.51.100.20",
        device: "dev-1",
        nonce,
        ts_ms: now_ms(),
        params: Value::Null,
    }
}

fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("?")
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn fresh(tag: &str) -> String {
    nonce(tag, SEQ.fetch_add(1, Ordering::Relaxed))
}

// ---------------------------------------------------------------------------------------------
// The suite, run against each backend

fn replay_on_another_instance(fleet: &[Engine], tag: &str) {
    for i in 0..20 {
        let c = call("/api/x", &format!("{{\"i\":{i}}}"), "u-replay", fresh(tag));
        let body = c.json();
        let first = &fleet[i % fleet.len()];
        let (s, v) = first.decide(&body);
        assert_eq!((s, code(&v)), (200, "OK"), "{v}");
        for (j, other) in fleet.iter().enumerate() {
            let (s, v) = other.decide(&body);
            assert_eq!(s, 200);
            assert_eq!(code(&v), "REPLAY_DUPLICATE", "instance {j}: {v}");
            assert_eq!(v["status"], 409);
        }
    }
}

fn exactly_one_of_concurrent_identical_requests_passes(fleet: &[Engine], tag: &str) {
    let fleet_bases: Vec<String> = fleet.iter().map(|e| e.base.clone()).collect();
    for round in 0..10 {
        let body = call(
            "/api/x",
            &format!("{{\"round\":{round}}}"),
            "u-race",
            fresh(tag),
        )
        .json();
        let passed = AtomicU64::new(0);
        let replays = AtomicU64::new(0);
        let start = std::sync::Barrier::new(12);
        std::thread::scope(|s| {
            for t in 0..12 {
                let url = format!("{}/v1/decide", fleet_bases[t % fleet_bases.len()]);
                let (body, passed, replays, start) = (&body, &passed, &replays, &start);
                s.spawn(move || {
                    let agent = support::agent();
                    let payload = body.to_string();
                    // Connected and ready, then all at once.
                    let _ = agent.get(&url.replace("/v1/decide", "/healthz")).call();
                    start.wait();
                    let mut r = agent
                        .post(&url)
                        .header("content-type", "application/json")
                        .send(payload)
                        .unwrap();
                    let st = r.status().as_u16();
                    let v: Value =
                        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
                    assert_eq!(st, 200);
                    match code(&v) {
                        "OK" => passed.fetch_add(1, Ordering::Relaxed),
                        "REPLAY_DUPLICATE" => replays.fetch_add(1, Ordering::Relaxed),
                        other => panic!("unexpected {other}: {v}"),
                    };
                });
            }
        });
        assert_eq!(passed.load(Ordering::Relaxed), 1, "round {round}");
        assert_eq!(replays.load(Ordering::Relaxed), 11);
    }
}

/// A request accepted near either edge of the window is a replay on another instance for as long
/// as its timestamp passes the window check there.
fn no_gap_at_the_window_edges(fleet: &[Engine], tag: &str) {
    let (a, b) = (&fleet[0], &fleet[fleet.len() - 1]);
    // Late edge: a fresh request, replayed on another instance once its timestamp is almost a
    // window old — the wait is the point: the record must outlive the slice it was written in.
    let c = call("/api/x", "{\"edge\":\"late\"}", "u-edge", fresh(tag));
    let ts = c.ts_ms;
    let body = c.json();
    assert_eq!(code(&a.decide(&body).1), "OK");
    while now_ms() < ts + WINDOW_MS - 150 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, v) = b.decide(&body);
    assert!(
        now_ms() - ts <= WINDOW_MS,
        "the machine was too slow to probe the late edge"
    );
    assert_eq!(code(&v), "REPLAY_DUPLICATE", "{v}");
    // Early edge: a timestamp almost a window ahead, replayed almost a window after it — 2W after
    // the first sighting, across slice rotations.
    let mut c = call("/api/x", "{\"edge\":\"early\"}", "u-edge", fresh(tag));
    c.ts_ms = now_ms() + WINDOW_MS - 50;
    let ts = c.ts_ms;
    let body = c.json();
    assert_eq!(code(&a.decide(&body).1), "OK");
    while now_ms() < ts + WINDOW_MS - 300 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, v) = b.decide(&body);
    assert!(
        now_ms() - ts <= WINDOW_MS,
        "the machine was too slow to probe the edge"
    );
    assert_eq!(code(&v), "REPLAY_DUPLICATE", "{v}");
    while now_ms() <= ts + WINDOW_MS + 20 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Past the window it is a clock problem, never a parameter error.
    assert_eq!(code(&b.decide(&body).1), "TIMESTAMP_SKEW");
}

fn claims_are_exact_over_instances(fleet: &[Engine], tag: &str) {
    let event = fresh(tag);
    let bases: Vec<String> = fleet.iter().map(|e| e.base.clone()).collect();
    let wins: Mutex<HashMap<String, u32>> = Mutex::new(HashMap::new());
    let next = AtomicU64::new(0);
    let others = AtomicU64::new(0);
    // 200 users, each trying twice (different submissions), 400 calls over 24 threads.
    std::thread::scope(|s| {
        for _ in 0..24 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= 400 {
                    break;
                }
                let user = format!("claimant-{}", i % 200);
                let attempt = i / 200;
                let mut c = call(
                    "/api/lottery",
                    &format!("{{\"event\":\"{event}\",\"attempt\":{attempt}}}"),
                    &user,
                    fresh(tag),
                );
                c.ip = "198.51.100.30";
                // Different submissions (the attempt differs), so only the claim can refuse them.
                c.params = serde_json::json!({ "event": event, "attempt": attempt });
                let url = format!(
                    "{}/v1/decide",
                    bases[(i as usize + attempt as usize) % bases.len()]
                );
                let (st, v) = support::post(&url, &c.json());
                assert_eq!(st, 200);
                match code(&v) {
                    "OK" => *wins.lock().unwrap().entry(user).or_default() += 1,
                    "QUOTA_EXHAUSTED" => {
                        others.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("unexpected {other}: {v}"),
                }
            });
        }
    });
    let wins = wins.into_inner().unwrap();
    let total: u32 = wins.values().sum();
    assert_eq!(total, 100, "exactly the stock is handed out");
    assert!(
        wins.values().all(|n| *n == 1),
        "nobody wins twice: {wins:?}"
    );
    assert_eq!(others.load(Ordering::Relaxed), 300);
}

fn limits_counters_and_distinct_counts_are_shared(fleet: &[Engine], tag: &str) {
    let user = fresh("rate-user");
    let (mut ok, mut limited) = (0, 0);
    for i in 0..15 {
        let c = call("/api/rate", &format!("{{\"i\":{i}}}"), &user, fresh(tag));
        let (_, v) = fleet[i % fleet.len()].decide(&c.json());
        match code(&v) {
            "OK" => ok += 1,
            "RATE_LIMITED" => {
                limited += 1;
                assert!(v["retry_after_ms"].as_u64().unwrap_or(0) > 0, "{v}");
                assert_eq!(v["status"], 429);
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    assert!(
        (5..=6).contains(&ok),
        "burst of 5 shared by all instances: {ok} allowed"
    );
    assert_eq!(ok + limited, 15);

    let user = fresh("count-user");
    let codes: Vec<String> = (0..5)
        .map(|i| {
            let c = call("/api/orders", &format!("{{\"i\":{i}}}"), &user, fresh(tag));
            code(&fleet[i % fleet.len()].decide(&c.json()).1).to_string()
        })
        .collect();
    assert_eq!(codes, ["OK", "OK", "OK", "RULE_DENY", "RULE_DENY"]);

    let device = fresh("device");
    let codes: Vec<String> = (0..3)
        .map(|i| {
            let mut c = call(
                "/api/signup",
                "{}",
                &format!("{device}-user-{i}"),
                fresh(tag),
            );
            c.device = Box::leak(device.clone().into_boxed_str());
            code(&fleet[i % fleet.len()].decide(&c.json()).1).to_string()
        })
        .collect();
    assert_eq!(
        codes,
        ["OK", "OK", "RULE_DENY"],
        "third account on one device"
    );
}

/// Scripts Redis has run so far (`INFO commandstats`).
fn scripts_run(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// On one node the anti-replay core is one script per decision: the nonce and, only when it is
/// new, the duplicate-submission fingerprint (it was two, one round trip each). Still exact: the
/// same submission with a new nonce is `DUPLICATE_SUBMISSION`, a replay is `REPLAY_DUPLICATE`,
/// and a replay records no fingerprint (its body then passes with a fresh nonce).
fn anti_replay_core_in_one_script(redis: &RedisServer, e: &Engine, tag: &str) {
    let before = scripts_run(redis);
    for i in 0..20 {
        let c = call("/api/x", &format!("{{\"one\":{i}}}"), "u-one", fresh(tag));
        assert_eq!(code(&e.decide(&c.json()).1), "OK");
    }
    assert_eq!(scripts_run(redis) - before, 20, "one script per decision");
    let first = call("/api/x", "{\"one\":0}", "u-one", fresh(tag));
    assert_eq!(code(&e.decide(&first.json()).1), "DUPLICATE_SUBMISSION");
    let c = call("/api/x", "{\"one\":\"a\"}", "u-one", fresh(tag));
    assert_eq!(code(&e.decide(&c.json()).1), "OK");
    // The same nonce with another body (signed anew): a replay, and no fingerprint recorded.
    let mut replay = call("/api/x", "{\"one\":\"b\"}", "u-one", c.nonce.clone());
    replay.ts_ms = c.ts_ms;
    assert_eq!(code(&e.decide(&replay.json()).1), "REPLAY_DUPLICATE");
    let b = call("/api/x", "{\"one\":\"b\"}", "u-one", fresh(tag));
    assert_eq!(
        code(&e.decide(&b.json()).1),
        "OK",
        "the replay recorded no fingerprint"
    );
}

/// On one node the gateway tier's rate limits ride the anti-replay script: a decision whose
/// limit allows costs one script and one round trip in all (it was one more of each per limit),
/// and the answers are those the rule gets asking Redis itself. A replay and a duplicate
/// submission spend nothing (the script stops before the limits); the refusal is remembered, so
/// the next request's script carries no limit and the rule is answered without Redis.
fn rate_limits_ride_the_anti_replay_script(
    redis: &RedisServer,
    e: &Engine,
    tag: &str,
    prefix: &str,
) {
    let user = fresh("ride");
    // Three requests a user may make (bursts of 3, one more every 1,000 s).
    let sent: Vec<Call> = (0..3)
        .map(|i| {
            call(
                "/api/slow-rate",
                &format!("{{\"r\":{i}}}"),
                &user,
                fresh(tag),
            )
        })
        .collect();
    // One call first, so that Redis holds the script (loading it is a round trip of its own).
    let warm = call("/api/slow-rate", "{}", &fresh("warm"), fresh(tag));
    assert_eq!(code(&e.decide(&warm.json()).1), "OK");
    let seen = monitored(redis, || {
        for c in &sent[..2] {
            assert_eq!(code(&e.decide(&c.json()).1), "OK");
        }
    });
    // The commands sent to Redis (not those a script ran, nor the background's: the Bloom
    // filters' fill sampling and the control plane's polling).
    let limit_key = format!("\"{prefix}:g:slow:{user}\"");
    let sent_cmds: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("] \"") && !l.contains("[0 lua]"))
        .filter(|l| !l.contains("\"BITCOUNT\"") && !l.contains(":ctl:"))
        .collect();
    assert_eq!(
        sent_cmds.len(),
        2,
        "one round trip per decision: {sent_cmds:#?}"
    );
    assert!(
        sent_cmds
            .iter()
            .all(|l| l.contains("\"EVALSHA\"") && l.contains(&limit_key)),
        "the limit inside each decision's script: {sent_cmds:#?}"
    );
    // A replay of the first (the same nonce) and the second sent again with a new nonce.
    assert_eq!(code(&e.decide(&sent[0].json()).1), "REPLAY_DUPLICATE");
    let again = call("/api/slow-rate", "{\"r\":1}", &user, fresh(tag));
    assert_eq!(code(&e.decide(&again.json()).1), "DUPLICATE_SUBMISSION");
    // Neither spent the limit: the third request still passes, the fourth is refused.
    assert_eq!(code(&e.decide(&sent[2].json()).1), "OK");
    let cached = e.metric("rampart_redis_refusals_cached_total");
    let fourth = call("/api/slow-rate", "{\"r\":3}", &user, fresh(tag));
    let v = e.decide(&fourth.json()).1;
    assert_eq!(code(&v), "RATE_LIMITED", "{v}");
    assert!(v["retry_after_ms"].as_u64().unwrap_or(0) > 900_000, "{v}");
    // Remembered: the fifth is refused without asking Redis for the limit.
    let seen = monitored(redis, || {
        let fifth = call("/api/slow-rate", "{\"r\":4}", &user, fresh(tag));
        assert_eq!(code(&e.decide(&fifth.json()).1), "RATE_LIMITED");
    });
    assert_eq!(
        e.metric("rampart_redis_refusals_cached_total") - cached,
        1.0
    );
    assert!(
        seen.iter()
            .filter(|l| l.contains("\"EVALSHA\""))
            .all(|l| !l.contains(&limit_key)),
        "{seen:#?}"
    );
    // The business tier's distinct count rides it too: a sign-up from a device costs one round
    // trip, the count made inside the script (and handed to the rule).
    let device: &'static str = Box::leak(fresh("ride-device").into_boxed_str());
    let signup = fresh("ride-signup");
    let seen = monitored(redis, || {
        let mut c = call("/api/signup", "{}", &signup, fresh(tag));
        c.device = device;
        assert_eq!(code(&e.decide(&c.json()).1), "OK");
    });
    // (A connection idle for over a second is checked with a PING first: not the decision's.)
    let sent_cmds: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("] \"") && !l.contains("[0 lua]"))
        .filter(|l| !l.contains("\"BITCOUNT\"") && !l.contains(":ctl:"))
        .filter(|l| !l.contains("\"PING\""))
        .collect();
    assert_eq!(sent_cmds.len(), 1, "one round trip: {sent_cmds:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("[0 lua]") && l.contains("\"PFADD\"") && l.contains(&signup)),
        "the distinct count inside the script: {seen:#?}"
    );
    // Two limits on one key in one script: the second sees what the first wrote. Bursts of 2
    // and 3 at the same rate: the first request takes one of each (the key's arrival time
    // moves by two steps), the second is refused by the burst of 2.
    let user = fresh("ride-twice");
    let seen = monitored(redis, || {
        let first = call("/api/twice", "{\"t\":0}", &user, fresh(tag));
        assert_eq!(code(&e.decide(&first.json()).1), "OK");
    });
    let twice_key = format!("\"{prefix}:g:tw:{user}\"");
    assert!(
        seen.iter()
            .any(|l| l.contains("\"EVALSHA\"") && l.matches(twice_key.as_str()).count() == 2),
        "both limits inside the script: {seen:#?}"
    );
    let second = call("/api/twice", "{\"t\":1}", &user, fresh(tag));
    let v = e.decide(&second.json()).1;
    assert_eq!(code(&v), "RATE_LIMITED", "{v}");
}

/// Every command Redis runs while `f` runs, as `redis-cli MONITOR` prints them (those a script
/// runs included, marked `lua`).
fn monitored(redis: &RedisServer, f: impl FnOnce()) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &redis.port.to_string(), "MONITOR"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli MONITOR");
    let out = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || out.lines().map_while(Result::ok).collect::<Vec<_>>());
    // MONITOR answers OK once it is on; a PING marks that point.
    std::thread::sleep(std::time::Duration::from_millis(300));
    f();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}

/// A flood over a rate limit: the key's refusal is remembered until its retry-after ends, so the
/// refused requests cost Redis no rate-limit call (the gateway's refusals still pay the anti-replay
/// core's one script and the detached reputation writes; the edge's pay nothing at all). The
/// answers stay those Redis would give.
fn refused_floods_cost_redis_no_limit_call(redis: &RedisServer, e: &Engine, tag: &str) {
    let user = fresh("flood-user");
    let cached_before = e.metric("rampart_redis_refusals_cached_total") as u64;
    let (mut ok, mut limited) = (0u64, 0u64);
    let seen = monitored(redis, || {
        for i in 0..100 {
            let c = call("/api/rate", &format!("{{\"f\":{i}}}"), &user, fresh(tag));
            let v = e.decide(&c.json()).1;
            match code(&v) {
                "OK" => ok += 1,
                "RATE_LIMITED" => {
                    limited += 1;
                    assert!(v["retry_after_ms"].as_u64().unwrap_or(0) > 0, "{v}");
                }
                other => panic!("unexpected {other}: {v}"),
            }
        }
    });
    let limit_calls = seen
        .iter()
        .filter(|l| l.contains("\"EVALSHA\"") && l.contains(&format!("\"rampart:g:user:{user}\"")))
        .count() as u64;
    let cached = e.metric("rampart_redis_refusals_cached_total") as u64 - cached_before;
    eprintln!("gateway flood: {ok} allowed, {limited} refused, {limit_calls} rate-limit calls");
    assert!(ok >= 5 && limited > 50, "{ok} allowed, {limited} limited");
    // A GCRA call for each allowed request, and for the first refusal after each remembered one
    // ended (at most one per allowed request, plus the first).
    assert!(
        limit_calls <= 2 * ok + 1,
        "{limit_calls} rate-limit calls for {ok} allowed and {limited} refused"
    );
    assert_eq!(
        limit_calls + cached,
        100,
        "every check was a call or a remembered refusal"
    );

    // The edge's IP limit runs before the nonce step: a remembered refusal there costs nothing.
    let mut edge_limited = 0;
    let seen = monitored(redis, || {
        for i in 0..60 {
            let c = call(
                "/api/edge-rate",
                &format!("{{\"e\":{i}}}"),
                &user,
                fresh(tag),
            );
            if code(&e.decide(&c.json()).1) == "RATE_LIMITED" {
                edge_limited += 1;
            }
        }
    });
    // Scripts the engine sent (not the control plane's polling or the fill sampling, which
    // MONITOR shows too).
    let commands = seen.iter().filter(|l| l.contains("\"EVALSHA\"")).count();
    let edge_ok = 60 - edge_limited;
    eprintln!("edge flood: {edge_ok} allowed, {edge_limited} refused, {commands} scripts");
    assert!(edge_limited > 40, "{edge_limited}");
    // Per allowed request: its GCRA and its anti-replay script; per refusal not remembered: its
    // GCRA; per remembered refusal: nothing.
    assert!(
        commands <= 3 * edge_ok + 1,
        "{commands} scripts for {edge_ok} allowed and {edge_limited} refused: {seen:#?}"
    );
}

fn fleet(dir: &Path, n: usize, name: &str, state: &str) -> Vec<Engine> {
    let rules = rules(dir);
    (0..n)
        .map(|i| Engine::start(dir, &format!("{name}-{i}"), &config(&rules, state)))
        .collect()
}

/// Reads of sliding-window counters are plain `HMGET`s computed by the engine (no script): they
/// must answer exactly what the in-process limiter answers — alone, in one pipelined batch whose
/// keys live on different cluster nodes, for keys never written, across the window's edges, and
/// for another window width.
fn window_reads_match_the_in_process_limiter(redis: RedisSettings) {
    let redis = Redis::start(&redis, RedisCounters::default()).expect("redis client");
    let remote = RedisLimiter::new(redis, false);
    let local = LocalLimiter::new(1000);
    let w = 1000;
    let t0 = 1_767_225_600_000; // a window start
    let keys: Vec<String> = (0..8).map(|i| fresh(&format!("win{i}"))).collect();
    // (ms after t0, key, n): n = 0 reads, anything else adds.
    let steps: &[(i64, usize, i64)] = &[
        (100, 0, 1),
        (200, 0, 2),
        (300, 0, 0),
        (300, 1, 0),
        (900, 1, 5),
        (950, 2, 7),
        (1250, 0, 0),
        (1250, 1, 0),
        (1250, 0, 1),
        (1250, 0, 0),
        (1999, 2, 0),
        (2500, 0, 0),
        (2500, 1, 0),
        (2999, 0, 0),
        (3000, 0, 0),
        (3100, 3, 4),
        (3600, 3, 0),
    ];
    for &(dt, k, n) in steps {
        let now = t0 + dt;
        let key = &keys[k];
        if n != 0 {
            assert_eq!(
                remote.incr(key, now, w, n).unwrap(),
                local.incr(key, now, w, n).unwrap(),
                "add {n} to key {k} at +{dt} ms"
            );
        } else {
            assert_eq!(
                remote.get(key, now, w).unwrap(),
                local.get(key, now, w).unwrap(),
                "read key {k} at +{dt} ms"
            );
        }
        let batch = remote.get_many(&keys, now, w).unwrap();
        let expected: Vec<i64> = keys.iter().map(|k| local.get(k, now, w).unwrap()).collect();
        assert_eq!(batch, expected, "batch read at +{dt} ms");
        assert_eq!(remote.get(key, now, 2 * w).unwrap(), 0, "another width");
    }
    assert!(
        steps.iter().any(|&(dt, k, _)| {
            let now = t0 + dt;
            local.get(&keys[k], now, w).unwrap() > 0
        }),
        "the script reads something"
    );
}

/// Waits up to 5 s for `ok`.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each instance's copy of the reputation counters (kept current by Redis pub/sub) answers what
/// Redis answers, without a call: after writes made by another client, across the window's
/// edges, after a reset, and in an instance started after the writes (read by its scan: once
/// ready, it is current at once). An instance that keeps no copy still publishes its writes.
fn the_reputation_copy_answers_what_redis_answers(url: &str) {
    let settings = node_settings(url);
    let writer = RedisLimiter::new(
        Redis::start(&settings, RedisCounters::default()).unwrap(),
        false,
    );
    let early_counters = RedisCounters::default();
    let early = RedisLimiter::new(
        Redis::start(&settings, early_counters.clone()).unwrap(),
        true,
    );
    eventually("the first copy is ready", || early.reputation_copy_ready());
    let w = 60_000;
    let t0 = now_ms() - now_ms() % w;
    let keys: Vec<String> = (0..4)
        .map(|i| format!("rep\u{1f}ip\u{1f}{}", fresh(&format!("copy{i}"))))
        .collect();
    for (dt, k, n) in [(100, 0, 10), (200, 1, 30), (300, 0, 5), (400, 2, 1)] {
        writer.incr(&keys[k], t0 + dt, w, n).unwrap();
    }
    let truth = |now: i64| writer.get_many(&keys, now, w).unwrap();
    assert_eq!(truth(t0 + 500), vec![15, 30, 1, 0]);
    eventually("the first copy learns the writes", || {
        early.get_many(&keys, t0 + 500, w).unwrap() == truth(t0 + 500)
    });
    let late_counters = RedisCounters::default();
    let late = RedisLimiter::new(
        Redis::start(&settings, late_counters.clone()).unwrap(),
        true,
    );
    eventually("the second copy is ready", || late.reputation_copy_ready());
    let calls = (early_counters.calls.get(), late_counters.calls.get());
    for now in [
        t0 + 500,
        t0 + w - 1,
        t0 + w + w / 4,
        t0 + 2 * w - 1,
        t0 + 2 * w,
    ] {
        let want = truth(now);
        assert_eq!(
            early.get_many(&keys, now, w).unwrap(),
            want,
            "first copy at +{}",
            now - t0
        );
        assert_eq!(
            late.get_many(&keys, now, w).unwrap(),
            want,
            "second copy at +{}",
            now - t0
        );
    }
    assert_eq!(
        (early_counters.calls.get(), late_counters.calls.get()),
        calls,
        "the copies answered without a call"
    );
    assert!(early_counters.reputation_reads_copied.get() >= 5);
    // A reset is a deletion everywhere; a write after it starts again from nothing.
    assert!(writer.reset(&keys[1]).unwrap());
    writer.incr(&keys[3], t0 + 600, w, 2).unwrap();
    for copy in [&early, &late] {
        eventually("the copies forget the reset key", || {
            copy.get_many(&keys, t0 + 700, w).unwrap() == vec![15, 0, 1, 2]
        });
    }
    // Other keys are not the copy's: they are read from Redis.
    let other = vec![fresh("not-reputation")];
    let before = early_counters.calls.get();
    assert_eq!(early.get_many(&other, t0 + 700, w).unwrap(), vec![0]);
    assert_eq!(early_counters.calls.get(), before + 1);
}

/// Each worker thread keeps its own connection. One Redis closed while it sat idle (`timeout`, or
/// a proxy's idle limit) is checked and replaced before use: no decision fails for it.
#[test]
fn a_connection_closed_while_idle_costs_no_call() {
    let redis = RedisServer::start();
    assert_eq!(redis.cli(&["CONFIG", "SET", "timeout", "1"]), "OK");
    let counters = RedisCounters::default();
    let client = Redis::start(&node_settings(&redis.url()), counters.clone()).unwrap();
    let limiter = RedisLimiter::new(client, false);
    let now = now_ms();
    assert_eq!(limiter.incr("idle", now, 600_000, 1).unwrap(), 1);
    let ours = |list: String| list.lines().filter(|l| l.contains("cmd=evalsha")).count();
    assert_eq!(
        ours(redis.cli(&["CLIENT", "LIST"])),
        1,
        "this thread's connection"
    );
    // Redis closes clients idle for more than a second (it checks a few times a second).
    let deadline = Instant::now() + Duration::from_secs(10);
    while ours(redis.cli(&["CLIENT", "LIST"])) != 0 {
        assert!(
            Instant::now() < deadline,
            "redis did not close the idle connection"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(limiter.incr("idle", now + 1, 600_000, 1).unwrap(), 2);
    assert_eq!(counters.errors.get(), 0, "no call failed");
}

fn node_settings(url: &str) -> RedisSettings {
    RedisSettings {
        url: url.into(),
        cluster_nodes: vec![],
        prefix: fresh("wr"),
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
        connections: 1,
        replica_acks: 0,
        replica_ack_timeout: Duration::from_millis(50),
        coalesce: true,
    }
}

fn suite(fleet: &[Engine], tag: &str) {
    replay_on_another_instance(fleet, tag);
    exactly_one_of_concurrent_identical_requests_passes(fleet, tag);
    no_gap_at_the_window_edges(fleet, tag);
    claims_are_exact_over_instances(fleet, tag);
    limits_counters_and_distinct_counts_are_shared(fleet, tag);
}

#[test]
fn single_node_three_instances_act_as_one() {
    let redis = RedisServer::start();
    let dir = temp_dir("redis-single");
    let url = redis.url();
    let bloom = fleet(
        &dir,
        3,
        "bloom",
        &format!("redis_url = \"{url}\"\nnonce_mode = \"bloom\"\n"),
    );
    suite(&bloom, "sb");
    anti_replay_core_in_one_script(&redis, &bloom[0], "sb-one");
    rate_limits_ride_the_anti_replay_script(&redis, &bloom[0], "sb-ride", "rampart");
    refused_floods_cost_redis_no_limit_call(&redis, &bloom[0], "sb-flood");
    window_reads_match_the_in_process_limiter(node_settings(&url));
    the_reputation_copy_answers_what_redis_answers(&url);
    // A whole batch on one worker (each item makes several Redis calls on that worker's thread).
    let items: Vec<Value> = (0..100)
        .map(|i| {
            call(
                "/api/x",
                &format!("{{\"b\":{i}}}"),
                "u-batch",
                fresh("sbatch"),
            )
            .json()
        })
        .collect();
    let (st, v) = support::post(
        &format!("{}/v1/decide/batch", bloom[0].base),
        &Value::Array(items.clone()),
    );
    assert_eq!(st, 200, "{v}");
    let answers = v
        .as_array()
        .or_else(|| v["decisions"].as_array())
        .expect("batch answers");
    assert_eq!(answers.len(), 100);
    assert!(answers.iter().all(|a| code(a) == "OK"), "{v}");
    let (_, v) = support::post(
        &format!("{}/v1/decide/batch", bloom[1].base),
        &Value::Array(items),
    );
    let answers = v
        .as_array()
        .or_else(|| v["decisions"].as_array())
        .expect("batch answers");
    assert!(answers.iter().all(|a| code(a) == "REPLAY_DUPLICATE"), "{v}");
    // Scripts are reloaded after the server forgets them (restart, failover, SCRIPT FLUSH).
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    replay_on_another_instance(&bloom, "sb-flushed");
    claims_are_exact_over_instances(&bloom, "sb-flushed");
    drop(bloom);
    // Each app's compact filter is recorded under its own key, with a probe seed the first
    // instance drew at random (not derived from anything an app's key holder can read): without
    // the record, the next instance under the same prefix draws another one.
    let layout = |r: &RedisServer| r.cli(&["GET", "rampart:nb:layout:shop"]);
    let first = layout(&redis);
    assert!(
        first.starts_with("v3 ") && first.contains(" seed="),
        "{first:?}"
    );
    assert_eq!(redis.cli(&["DEL", "rampart:nb:layout:shop"]), "1");
    drop(fleet(
        &dir,
        1,
        "reseeded",
        &format!("redis_url = \"{url}\"\nnonce_mode = \"bloom\"\n"),
    ));
    let second = layout(&redis);
    assert_eq!(first.split(" seed=").next(), second.split(" seed=").next());
    assert_ne!(first, second, "a new record draws a new seed");
    // An instance whose filter layout differs would probe other bits and miss the fleet's
    // nonces: it refuses to start under the same prefix.
    let (code, err) = Engine::refused(
        &dir,
        "other-layout",
        &config(
            &rules(&dir),
            &format!("redis_url = \"{url}\"\nnonce_mode = \"bloom\"\nexpected_rps = 5000\n"),
        ),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another layout"), "{err}");

    // Exact mode, with concurrent decisions' scripts sharing writes (`redis_coalesce`; the bloom
    // fleet above writes each on its own): the same answers, the same single command.
    let exact = fleet(
        &dir,
        2,
        "exact",
        &format!(
            "redis_url = \"{url}\"\nnonce_mode = \"exact\"\nredis_prefix = \"rx\"\n\
             redis_coalesce = true\n"
        ),
    );
    replay_on_another_instance(&exact, "se");
    anti_replay_core_in_one_script(&redis, &exact[0], "se-one");
    // Exact mode keeps one key per live nonce under its own prefix (each expires when its
    // timestamp can no longer pass the window).
    let keys = redis.cli(&["--scan", "--pattern", "rx:n:shop:*"]);
    assert!(keys.lines().count() >= 10, "{keys}");
    rate_limits_ride_the_anti_replay_script(&redis, &exact[0], "se-ride", "rx");
    exactly_one_of_concurrent_identical_requests_passes(&exact, "se");
    no_gap_at_the_window_edges(&exact, "se");
    let scripts = exact[0].metric("rampart_redis_coalesced_commands_total");
    let writes = exact[0].metric("rampart_redis_coalesced_writes_total");
    assert!(
        scripts >= 30.0 && writes >= 1.0 && writes <= scripts,
        "{writes} writes, {scripts} scripts"
    );
    // A script Redis forgot is loaded again by the decision that leads the write, and the
    // commands it carried are sent again (they did not run).
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    replay_on_another_instance(&exact, "se-flushed");
}

#[test]
fn three_master_cluster_three_instances_act_as_one() {
    let cluster = RedisCluster::start(3);
    let dir = temp_dir("redis-cluster");
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let state = format!(
        "redis_cluster_nodes = [{}]\nnonce_mode = \"bloom\"\n",
        nodes.join(", ")
    );
    let bloom = fleet(&dir, 3, "cluster", &state);
    suite(&bloom, "cb");
    window_reads_match_the_in_process_limiter(RedisSettings {
        url: String::new(),
        cluster_nodes: cluster.urls(),
        ..node_settings("")
    });
    // The state is spread over every master: Bloom shards, claim segments and counters hash to
    // different slots.
    for n in &cluster.nodes {
        let keys: u64 = n.cli(&["DBSIZE"]).parse().unwrap();
        assert!(keys > 0, "master {} holds no keys", n.port);
    }
    drop(bloom);
    let state = format!(
        "redis_cluster_nodes = [{}]\nnonce_mode = \"exact\"\nredis_prefix = \"cx\"\n",
        nodes.join(", ")
    );
    let exact = fleet(&dir, 2, "cluster-exact", &state);
    replay_on_another_instance(&exact, "ce");
    exactly_one_of_concurrent_identical_requests_passes(&exact, "ce");
    drop(exact);
    paused_masters_run_each_write_once(&cluster, &dir, &nodes);
}

/// Every master holds writes for 450 ms (`CLIENT PAUSE … WRITE`: the commands run when the pause
/// ends) while the engine waits 300 ms for an answer. The cluster client used to re-send the
/// command on the same connection at once: the request passed on the first answer, and the
/// second (a "seen" for its own nonce) stayed in the connection for the next request to read — a
/// fresh request judged `REPLAY_DUPLICATE`. Now the client never re-sends on its own; the engine
/// sends the nonce write again on a fresh connection and it recognises its own first run.
fn paused_masters_run_each_write_once(cluster: &RedisCluster, dir: &Path, nodes: &[String]) {
    for mode in ["bloom", "exact"] {
        let tag = format!("cp-{mode}");
        let state = format!(
            "redis_cluster_nodes = [{}]\nnonce_mode = \"{mode}\"\nredis_prefix = \"{tag}\"\n\
             redis_timeout_ms = 300\n",
            nodes.join(", ")
        );
        let e = Engine::start(dir, &tag, &config(&rules(dir), &state));
        for round in 0..3 {
            let c = call(
                "/api/x",
                &format!("{{\"pause\":{round}}}"),
                "u-pause",
                fresh(&tag),
            );
            for n in &cluster.nodes {
                assert_eq!(n.cli(&["CLIENT", "PAUSE", "450", "WRITE"]), "OK");
            }
            let (s, v) = e.decide(&c.json());
            assert_eq!((s, code(&v)), (200, "OK"), "{mode}: {v}");
            let (_, v) = e.decide(&c.json());
            assert_eq!(code(&v), "REPLAY_DUPLICATE", "{mode}: {v}");
            for i in 0..20 {
                let body = format!("{{\"after\":{i},\"round\":{round}}}");
                let c = call("/api/x", &body, "u-pause", fresh(&tag));
                let (_, v) = e.decide(&c.json());
                assert_eq!(
                    code(&v),
                    "OK",
                    "{mode}, a fresh request after the pause: {v}"
                );
            }
        }
    }
}

/// Load from a few threads against an engine until `stop`; every answer's (HTTP status, code,
/// degraded) with the time it came back.
fn load(
    base: String,
    stop: Arc<AtomicBool>,
    tag: &'static str,
) -> std::thread::JoinHandle<Vec<(Instant, u16, String, bool)>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let c = call(
                "/api/x",
                &format!("{{\"n\":\"{}\"}}", fresh(tag)),
                "u-load",
                fresh(tag),
            );
            let (s, v) = support::post(&format!("{base}/v1/decide"), &c.json());
            seen.push((
                Instant::now(),
                s,
                code(&v).to_string(),
                v["degraded"].as_bool().unwrap_or(false),
            ));
            std::thread::sleep(Duration::from_millis(5));
        }
        seen
    })
}

#[test]
fn redis_killed_mid_load_answers_by_the_declared_policy_and_recovers() {
    let mut redis = RedisServer::start();
    let dir = temp_dir("redis-kill");
    let rules = rules(&dir);
    let url = redis.url();
    let mut strict = Engine::start(
        &dir,
        "strict",
        &config(
            &rules,
            &format!("redis_url = \"{url}\"\non_store_error = \"deny\"\nredis_timeout_ms = 100\n"),
        ),
    );
    // A second app with a long window, for nonces replayed across the outage.
    let long_app = format!("[[apps]]\nid = \"long\"\nsecret = \"{SECRET}\"\nwindow_ms = 20000\n");
    let mut lenient = Engine::start(
        &dir,
        "lenient",
        &format!(
            "{long_app}{}",
            config(
                &rules,
                &format!(
                    // Its own prefix: its windows differ, so its filter layout does too.
                    "redis_url = \"{url}\"\nredis_prefix = \"lenient\"\non_store_error = \"allow\"\nlocal_fallback = true\nredis_timeout_ms = 100\n"
                ),
            )
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let loads = [
        load(strict.base.clone(), stop.clone(), "ks"),
        load(lenient.base.clone(), stop.clone(), "kl"),
    ];
    std::thread::sleep(Duration::from_millis(500));
    // Accepted by the lenient instance while Redis works: its local fallback knows this nonce.
    let before = call("/api/x", "{\"before\":1}", "u-before", fresh("kb")).json();
    assert_eq!(code(&lenient.decide(&before).1), "OK");
    redis.kill();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(300));

    // During the outage (and within the request's window): the lenient instance still catches
    // its own replays.
    let (_, v) = lenient.decide(&before);
    assert_eq!(code(&v), "REPLAY_DUPLICATE", "{v}");
    assert_eq!(v["degraded"], true);
    std::thread::sleep(Duration::from_millis(1200));
    // Accepted during the outage by the lenient instance alone (Redis never sees it).
    let mut c = call("/api/x", "{\"during\":1}", "u-during", fresh("kdl"));
    c.app = "long";
    let during = c.json();
    let (_, v) = lenient.decide(&during);
    assert_eq!(
        (code(&v), &v["degraded"]),
        ("OK", &Value::Bool(true)),
        "{v}"
    );
    let (_, v) = strict.decide(&call("/api/x", "{\"during\":1}", "u-d", fresh("kd")).json());
    assert_eq!(code(&v), "STORE_UNAVAILABLE", "{v}");
    assert_eq!(v["status"], 503);

    // The outage ends when the restart begins: `restart` returns only once Redis answers, and an
    // engine may reconnect before that.
    let restarting = Instant::now();
    redis.restart();
    // Service resumes without restarting the engines.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, v) = strict.decide(&call("/api/x", "{\"after\":1}", "u-a", fresh("ka")).json());
        if code(&v) == "OK" {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Redis is back, empty: the nonce accepted during the outage is still a replay here.
    let (_, v) = lenient.decide(&during);
    assert_eq!(code(&v), "REPLAY_DUPLICATE", "{v}");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let [s, l] = loads;
    let (s, l) = (s.join().unwrap(), l.join().unwrap());
    assert!(strict.alive() && lenient.alive(), "no crash");

    for (_, http, c, _) in s.iter().chain(l.iter()) {
        assert_eq!(*http, 200, "never a 5xx from the API itself ({c})");
    }
    // The strict instance: only OK or the fail-closed code; the outage shows as STORE_UNAVAILABLE.
    assert!(s
        .iter()
        .all(|(_, _, c, _)| c == "OK" || c == "STORE_UNAVAILABLE"));
    let during = |t: &Instant| *t > killed + Duration::from_millis(300) && *t < restarting;
    assert!(s
        .iter()
        .filter(|(t, ..)| during(t))
        .all(|(_, _, c, _)| c == "STORE_UNAVAILABLE"));
    assert!(s.iter().filter(|(t, ..)| during(t)).count() > 10);
    // The lenient instance: everything passes, marked degraded while Redis is away.
    assert!(
        l.iter().all(|(_, _, c, _)| c == "OK"),
        "fresh requests pass"
    );
    assert!(l
        .iter()
        .filter(|(t, ..)| during(t))
        .all(|(_, _, _, degraded)| *degraded));
    let after = s.last().unwrap();
    assert_eq!(after.2, "OK", "the strict instance serves again");
    assert!(
        !l.last().unwrap().3,
        "the lenient instance is no longer degraded"
    );

    let m = strict.metrics();
    assert!(
        m.contains("rampart_redis_errors_total") || m.contains("rampart_redis_fast_failures_total"),
        "{m}"
    );
    assert!(m.contains("rampart_redis_up 1"), "{m}");

    // The outage is visible in each instance's metrics, by its declared policy: fail-closed
    // decisions counted under STORE_UNAVAILABLE, fail-open ones as degraded.
    let sum = |text: &str, name: &str, label: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let unavailable = "code=\"STORE_UNAVAILABLE\"";
    assert!(
        sum(&m, "rampart_decisions_total{", unavailable) > 10.0,
        "{m}"
    );
    assert_eq!(sum(&m, "rampart_degraded_decisions_total", ""), 0.0, "{m}");
    let lm = lenient.metrics();
    assert!(
        sum(&lm, "rampart_degraded_decisions_total", "") > 10.0,
        "{lm}"
    );
    assert_eq!(
        sum(&lm, "rampart_decisions_total{", unavailable),
        0.0,
        "{lm}"
    );
}

// ---------------------------------------------------------------------------------------------
// Slow answers: a write that ran but whose answer came late

/// A TCP proxy in front of Redis that can hold back one answer: armed with byte patterns, it
/// delays the answer to the first command (on any connection) whose bytes contain one of them.
/// The command itself reaches Redis at once, so it runs; only its answer is late.
/// Byte patterns to watch for, and how long to hold back the answer of the command that has one.
type Trigger = Arc<Mutex<Option<(Vec<Vec<u8>>, Duration)>>>;

struct SlowAnswers {
    port: u16,
    armed: Trigger,
}

impl SlowAnswers {
    fn start(redis_port: u16) -> SlowAnswers {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Trigger = Arc::default();
        let armed2 = armed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", redis_port)) else {
                    continue;
                };
                let delay: Arc<Mutex<Option<Duration>>> = Arc::default();
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (armed, d1) = (armed2.clone(), delay.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        let mut a = armed.lock().unwrap();
                        let hit = a.as_ref().is_some_and(|(pats, _)| {
                            pats.iter()
                                .any(|p| chunk.windows(p.len()).any(|w| w == &p[..]))
                        });
                        if hit {
                            *d1.lock().unwrap() = a.take().map(|(_, d)| d);
                        }
                        drop(a);
                        if s_out.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if let Some(d) = delay.lock().unwrap().take() {
                            std::thread::sleep(d);
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        SlowAnswers { port, armed }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds back, by `d`, the answer to the next command containing any of `patterns`.
    fn arm(&self, patterns: &[&[u8]], d: Duration) {
        *self.armed.lock().unwrap() = Some((patterns.iter().map(|p| p.to_vec()).collect(), d));
    }

    fn fired(&self) -> bool {
        self.armed.lock().unwrap().is_none()
    }
}

/// The nonce write of a request ran, but its answer came after `redis_timeout_ms`: the engine
/// sends it again on a fresh connection, the second run recognises the first one's write by its
/// token, and the request passes — once (its replay is still refused), in both nonce modes. With
/// blind retries the request was refused (`STORE_UNAVAILABLE`, or judged a replay of itself).
#[test]
fn a_nonce_write_whose_answer_came_late_is_not_judged_a_replay_of_itself() {
    let redis = RedisServer::start();
    let proxy = SlowAnswers::start(redis.port);
    let dir = temp_dir("redis-slow");
    let rules = rules(&dir);
    for (mode, tag) in [("exact", "slow-x"), ("bloom", "slow-b")] {
        let e = engine_in_mode(&dir, &rules, tag, &proxy.url(), mode, 300);
        let warm = call("/api/x", "{}", "u-slow", fresh(tag));
        assert_eq!(code(&e.decide(&warm.json()).1), "OK");
        for i in 0..3 {
            // The nonce write: a `SET`/script on `<p>:n:shop:<nonce>` (exact), or the bitmap
            // script with its call's token key `<p>:nb:{…}:t:<token>` (compact).
            proxy.arm(&[b":n:shop:", b"}:t:"], Duration::from_millis(600));
            let c = call("/api/x", &format!("{{\"slow\":{i}}}"), "u-slow", fresh(tag));
            let (s, v) = e.decide(&c.json());
            assert!(proxy.fired(), "the nonce write went through the proxy");
            assert_eq!((s, code(&v)), (200, "OK"), "{mode}: {v}");
            let (_, v) = e.decide(&c.json());
            assert_eq!(code(&v), "REPLAY_DUPLICATE", "{mode}: {v}");
        }
        // Nothing is out of step afterwards: every fresh request passes.
        for i in 0..30 {
            let c = call(
                "/api/x",
                &format!("{{\"after\":{i}}}"),
                "u-slow",
                fresh(tag),
            );
            let (_, v) = e.decide(&c.json());
            assert_eq!(code(&v), "OK", "{mode}: {v}");
        }
        let metrics = e.metrics();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("rampart_redis_resent_total ") && !l.ends_with(" 0")),
            "{metrics}"
        );
    }
}

/// A paused Redis parks decisions, not the HTTP workers: while 40 decisions wait on Redis
/// (`CLIENT PAUSE`), `/healthz` and `/metrics` answer at once; when Redis resumes, every decision
/// completes by its policy (here: all allowed, the pause being shorter than the call timeout and
/// than the requests' 20 s window; a call that outlasts its request's window is refused, see
/// `a_replay_judged_after_its_record_expired_is_never_new`).
/// With `decision_threads = 0` (each decision on its worker, eight workers per core) the probe
/// waited until Redis resumed.
#[test]
fn a_paused_redis_parks_decisions_never_the_workers() {
    let long_app = format!("[[apps]]\nid = \"long\"\nsecret = \"{SECRET}\"\nwindow_ms = 20000\n");
    let redis = RedisServer::start();
    let dir = temp_dir("redis-paused");
    let rules = rules(&dir);
    let e = Engine::start(
        &dir,
        "paused",
        &format!(
            "{long_app}{}",
            config(
                &rules,
                &format!("redis_url = \"{}\"\nredis_timeout_ms = 4000\n", redis.url()),
            )
        ),
    );
    let c = call("/api/x", "{\"warm\":1}", "u-paused", fresh("paused"));
    assert_eq!(code(&e.decide(&c.json()).1), "OK");
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "2500", "ALL"]), "OK");
    let done = std::sync::Arc::new(AtomicU64::new(0));
    let base = e.base.clone();
    let waiting: Vec<_> = (0..40)
        .map(|i| {
            let (done, base) = (done.clone(), base.clone());
            let mut c = call(
                "/api/x",
                &format!("{{\"p\":{i}}}"),
                "u-paused",
                fresh("paused"),
            );
            c.app = "long";
            let body = c.json();
            std::thread::spawn(move || {
                let (status, v) = support::post(&format!("{base}/v1/decide"), &body);
                done.fetch_add(1, Ordering::SeqCst);
                (status, code(&v).to_string())
            })
        })
        .collect();
    // Let every decision reach Redis, then probe the API while they wait.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let health = agent().get(&format!("{base}/healthz")).call();
    let finished_by_then = done.load(Ordering::SeqCst);
    assert!(health.is_ok_and(|r| r.status() == 200));
    assert!(e.metrics().contains("rampart_decisions_total"));
    assert_eq!(
        finished_by_then, 0,
        "the probe answered while every decision still waited"
    );
    for w in waiting {
        assert_eq!(w.join().unwrap(), (200, "OK".to_string()));
    }
}

/// A replay whose nonce write reaches Redis only after the first sighting's record expired is
/// never judged new: here the replay passes the window step almost a window after its timestamp,
/// then Redis holds every command (`CLIENT PAUSE`) until well past the record's expiry. Before
/// the engine compared the call's duration with the record's TTL, the script found no record and
/// the replay was allowed (`OK`, seen on the exact store); now it is refused at the window step,
/// as it would be had it arrived when Redis ran the script.
#[test]
fn a_replay_judged_after_its_record_expired_is_never_new() {
    let redis = RedisServer::start();
    let dir = temp_dir("redis-late");
    let rules = rules(&dir);
    for mode in ["exact", "bloom"] {
        let name = format!("late-{mode}");
        let e = engine_in_mode(&dir, &rules, &name, &redis.url(), mode, 4000);
        let c = call("/api/x", "{\"late\":1}", "u-late", fresh(&name));
        let ts = c.ts_ms;
        let body = c.json();
        assert_eq!(code(&e.decide(&body).1), "OK");
        while now_ms() < ts + WINDOW_MS - 300 {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The record lives until ts + W + 1 (2 × W retention, no clock margin); Redis answers
        // nothing before ts + W + 600.
        assert_eq!(redis.cli(&["CLIENT", "PAUSE", "900", "ALL"]), "OK");
        let asked = now_ms();
        let (s, v) = e.decide(&body);
        assert!(
            asked - ts < WINDOW_MS - 100,
            "the machine was too slow to ask inside the window"
        );
        assert_eq!((s, code(&v)), (200, "TIMESTAMP_SKEW"), "{mode}: {v}");
        // And a fresh request after the pause is judged as ever.
        let c = call("/api/x", "{\"after\":1}", "u-late", fresh(&name));
        assert_eq!(code(&e.decide(&c.json()).1), "OK", "{mode}");
    }
}

/// With Redis state a subject's reputation is one for the fleet: the refusals one instance made
/// show on another, and a reset made on one is read by the other at once.
#[test]
fn a_subjects_reputation_is_read_and_reset_across_instances() {
    let redis = RedisServer::start();
    let dir = temp_dir("redis-subjects");
    let fleet = fleet(
        &dir,
        2,
        "subjects",
        &format!("redis_url = \"{}\"\n", redis.url()),
    );
    let user = fresh("subject-user");
    let mut limited = 0;
    for i in 0..15 {
        let c = call(
            "/api/rate",
            &format!("{{\"s\":{i}}}"),
            &user,
            fresh("subjects"),
        );
        if code(&fleet[0].decide(&c.json()).1) == "RATE_LIMITED" {
            limited += 1;
        }
    }
    assert!(limited >= 5, "{limited}");
    // Reputation learning is sent without waiting: give it a moment to land.
    let path = format!("/admin/v1/subjects/user/{user}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let points = loop {
        let (st, v) = fleet[1].admin_get(&path);
        assert_eq!(st, 200, "{v}");
        let p = v["reputation"]["points"].as_i64().unwrap_or(0);
        if p >= 10 * limited || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(points, 10 * limited, "ten points per gateway denial");
    let (st, v) = fleet[0].admin_post(&format!("{path}/reputation/reset"), &serde_json::json!({}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["reputation"]["before"], points);
    let (_, v) = fleet[1].admin_get(&path);
    assert_eq!(v["reputation"]["points"], 0, "{v}");
    let (_, v) = fleet[0].admin_get(&format!("/admin/v1/subjects/ip/{}", "198.51.100.20"));
    assert!(
        v["reputation"]["points"].as_i64().unwrap_or(0) > 0,
        "the address kept its points: {v}"
    );
    // The rate limits keyed by the user, read on the other instance from the shared state: two
    // requests spent two of the slow limit's three (one more every 1,000 s).
    for i in 0..2 {
        let c = call(
            "/api/slow-rate",
            &format!("{{\"s\":{i}}}"),
            &user,
            fresh("slow"),
        );
        assert_eq!(code(&fleet[0].decide(&c.json()).1), "OK");
    }
    let (_, v) = fleet[1].admin_get(&format!("/admin/v1/subjects/user/{user}"));
    let limit = |key: String| {
        v["limits"]
            .as_array()
            .and_then(|l| l.iter().find(|x| x["key"] == key.as_str()).cloned())
            .unwrap_or_else(|| panic!("no limit {key} in {v}"))
    };
    let slow = limit(format!("slow:{user}"));
    assert_eq!(
        (
            &slow["rule"],
            &slow["burst"],
            &slow["remaining"],
            &slow["retry_after_ms"]
        ),
        (
            &serde_json::json!("slow-rate"),
            &serde_json::json!(3),
            &serde_json::json!(1),
            &serde_json::json!(0)
        ),
        "{slow}"
    );
    assert!(slow["full_in_ms"].as_u64().unwrap() > 1_000_000, "{slow}");
    assert_eq!(limit(format!("user:{user}"))["rate_per_sec"], 5.0);
    // Looking spends nothing: the third request still passes, the fourth is refused.
    for (i, want) in [(2, "OK"), (3, "RATE_LIMITED")] {
        let c = call(
            "/api/slow-rate",
            &format!("{{\"s\":{i}}}"),
            &user,
            fresh("slow"),
        );
        assert_eq!(code(&fleet[1].decide(&c.json()).1), want);
    }

    // The claims the user holds, granted on one instance, listed on the other; a claim refused
    // as a duplicate adds nothing, and another user's claim is not listed.
    let events = [fresh("ev-b"), fresh("ev-a")];
    for (i, (event, who, want)) in [
        (&events[0], user.as_str(), "OK"),
        (&events[1], user.as_str(), "OK"),
        (&events[1], user.as_str(), "QUOTA_EXHAUSTED"),
        (&events[0], "someone-else", "OK"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = call(
            "/api/lottery",
            &format!("{{\"event\":\"{event}\",\"attempt\":{i}}}"),
            who,
            fresh("claims"),
        );
        c.params = serde_json::json!({ "event": event, "attempt": i });
        assert_eq!(code(&fleet[0].decide(&c.json()).1), want);
    }
    let mut want: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::json!({ "pool": format!("prize-{e}") }))
        .collect();
    want.sort_by_key(|v| v["pool"].as_str().unwrap().to_string());
    let deadline = Instant::now() + Duration::from_secs(5);
    let claims = loop {
        let (_, v) = fleet[1].admin_get(&path);
        if v["claims"] == serde_json::json!(want) || Instant::now() > deadline {
            break v["claims"].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(claims, serde_json::json!(want));
    let (_, v) = fleet[1].admin_get("/admin/v1/subjects/user/someone-else");
    assert_eq!(
        v["claims"],
        serde_json::json!([{ "pool": format!("prize-{}", events[0]) }])
    );
    let (_, v) = fleet[1].admin_get(&format!("/admin/v1/subjects/ip/{}", "198.51.100.20"));
    assert!(v.get("claims").is_none(), "only a user holds claims: {v}");
}
