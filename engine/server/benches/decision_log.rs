//! The decision log in a real ClickHouse, measured in one run (`cargo bench -p rampart --bench
//! decision_log`; needs `clickhouse-server` — `scripts/test.sh` installs it):
//!
//! 1. **Rows per second** into ClickHouse through the sink (RowBinary batches of `batch_rows`).
//! 2. **Decision latency with ClickHouse up vs down**: the same closed-loop load on `POST
//!    /v1/decide` of a `rampart serve` process, first with ClickHouse answering, then stopped
//!    (rows go to the spool); client-side p50 and p99, and their ratio.
//!
//! 3. **Rows per second into a cluster vs one server**, in the same run: the same rows through the
//!    sink into one server and into a 2 shards × 2 replicas cluster (with ZooKeeper) through one
//!    node's `Distributed` table, timed until the insert is acknowledged and until every row is
//!    in its shard (`count()` through the `Distributed` table). All servers share this machine's
//!    cores, so the ratio is what the cluster's extra work costs (forwarding, replication), not
//!    what more machines would add.
//!
//! Environment: `BENCH_ROWS` (default 2000000; section 3: `BENCH_CLUSTER_ROWS`, default 500000),
//! `BENCH_SECONDS` (per latency phase, default 5), `BENCH_THREADS` (default 4), `BENCH_ONLY=cluster`
//! (section 3 alone).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart::config::SpoolFull;
use rampart::declog::clickhouse::{ChRow, ChSettings, ChSink};
use rampart::metrics::Metrics;
use serde_json::Value;
use support::{env, now_ms, temp_dir, Call, ClickHouseCluster, ClickHouseServer, Engine};

fn row(i: u64, t0: i64) -> ChRow {
    ChRow {
        time: ((t0 + (i / 100) as i64) / 1000) as u32,
        time_ms: (t0 + (i / 100) as i64) as u64,
        decision_id: format!("{:016x}-{i:016x}", t0),
        app: "shop".into(),
        method: "POST".into(),
        route: ["/api/orders", "/api/pay", "/api/login", "/api/search"][(i % 4) as usize].into(),
        user: format!("u{}", i % 50_000),
        ip: format!("81.2.{}.{}", (i / 256) % 256, i % 256),
        country: ["CN", "US", "DE", "BR"][(i % 4) as usize].into(),
        isp: "example-isp".into(),
        device_type: ["mobile", "desktop"][(i % 2) as usize].into(),
        ua_family: "chrome".into(),
        user_agent:
            "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36"
                .into(),
        ja3: "771,4865-4866-4867,0-23-65281,29-23-24,0".into(),
        tier: if i.is_multiple_of(10) {
            "gateway".into()
        } else {
            String::new()
        },
        rule: if i.is_multiple_of(10) {
            "ip-rate".into()
        } else {
            String::new()
        },
        action: if i.is_multiple_of(10) { 4 } else { 1 },
        code: if i.is_multiple_of(10) {
            "RATE_LIMITED".into()
        } else {
            "OK".into()
        },
        status: if i.is_multiple_of(10) { 429 } else { 200 },
        score: 0,
        reasons: "[]".into(),
        shadow: "[]".into(),
        ruleset_version: "bench".into(),
        arm: "stable".into(),
        latency_us: 40 + (i % 60) as u32,
        degraded: 0,
        instance: "bench".into(),
        // A typical recorded request (what backtests replay).
        request: format!(
            r#"{{"query":"sku={}&lang=en","headers":{{"user-agent":"Mozilla/5.0","content-type":"application/json"}},"params":{{"sku":{},"qty":1}},"body":null,"device_id":"d{}"}}"#,
            i % 977,
            i % 977,
            i % 50_000
        ),
        device_id: format!("d{}", i % 50_000),
        key_id: "default".into(),
        challenge: String::new(),
    }
}

fn rows_per_second(ch: &ClickHouseServer) {
    let n = env("BENCH_ROWS", 2_000_000);
    ch.query("CREATE DATABASE IF NOT EXISTS bench").unwrap();
    let (took, _) = timed_insert(ch.url(), None, "bench", n, ch);
    let stored = ch.count("SELECT count() FROM bench.rampart_decisions");
    assert_eq!(stored, n, "every row stored");
    println!(
        "rows into ClickHouse: {n} rows in {took:.2} s = {:.0} rows/s (batches of 100000, target ≥ 200000)",
        n as f64 / took
    );
}

fn latency(engine: &Engine, seconds: u64, tag: &str) -> (u64, f64, f64) {
    let threads = env("BENCH_THREADS", 4);
    let stop = AtomicBool::new(false);
    let seq = AtomicU64::new(0);
    let mut all: Vec<u64> = Vec::new();
    let url = format!("{}/v1/decide", engine.base);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let agent = support::agent();
                    let mut lat = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let i = seq.fetch_add(1, Ordering::Relaxed);
                        let body = Call {
                            app: "shop",
                            secret: b"bench",
                            path: "/api/x",
                            body: format!("{{\"i\":{i}}}"),
                            user: "u",
                            ip: "81.2.3.4",
                            device: "d",
                            nonce: format!("{tag}-{i:016x}-n"),
                            ts_ms: now_ms(),
                            params: Value::Null,
                        }
                        .json()
                        .to_string();
                        let t = Instant::now();
                        let mut r = agent
                            .post(&url)
                            .header("content-type", "application/json")
                            .send(body)
                            .unwrap();
                        let _ = r.body_mut().read_to_string();
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            all.extend(h.join().unwrap());
        }
    });
    all.sort_unstable();
    let p = |q: f64| all[((all.len() - 1) as f64 * q) as usize] as f64;
    (all.len() as u64, p(0.5), p(0.99))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "cluster") {
        cluster_vs_server();
        return;
    }
    let mut ch = ClickHouseServer::start();
    rows_per_second(&ch);

    let dir = temp_dir("bench-chlat");
    let engine = Engine::start(
        &dir,
        "latency",
        &format!(
            "clickhouse_url = \"{}\"\nclickhouse_database = \"bench\"\nbatch_ms = 200\nretry_ms = 500\n\
             [[apps]]\nid = \"shop\"\nsecret = \"bench\"\nwindow_ms = 60000\n[rules]\ndefaults = false\n",
            ch.url()
        ),
    );
    let seconds = env("BENCH_SECONDS", 5);
    let _ = latency(&engine, 1, "warm");
    let (n_up, p50_up, p99_up) = latency(&engine, seconds, "up");
    ch.stop();
    let (n_down, p50_down, p99_down) = latency(&engine, seconds, "down");
    println!(
        "decision latency, POST /v1/decide, {} closed-loop clients:",
        env("BENCH_THREADS", 4)
    );
    println!("  clickhouse up:   {n_up:>7} decisions, p50 {p50_up:.0} µs, p99 {p99_up:.0} µs");
    println!("  clickhouse down: {n_down:>7} decisions, p50 {p50_down:.0} µs, p99 {p99_down:.0} µs (rows spooled)");
    println!(
        "  p99 down / up = {:.2} (target: within 10%)",
        p99_down / p99_up.max(1.0)
    );
    drop(ch);
    cluster_vs_server();
}

/// Inserts `n` rows through the sink into `url` (`cluster`: its name); the seconds until the
/// insert was acknowledged and until `count` (asked of `ask`) saw them all.
fn timed_insert(
    url: String,
    cluster: Option<String>,
    db: &str,
    n: u64,
    ask: &ClickHouseServer,
) -> (f64, f64) {
    let dir = temp_dir(&format!("bench-chins-{db}"));
    let settings = ChSettings {
        url,
        database: db.into(),
        user: String::new(),
        password: String::new(),
        batch_rows: 100_000,
        batch_ms: 1_000,
        timeout: Duration::from_secs(120),
        retry_ms: 1_000,
        spool_dir: dir.join("spool"),
        spool_max_bytes: 1 << 30,
        on_spool_full: SpoolFull::DropNewest,
        cluster,
    };
    rampart::declog::clickhouse::migrate(&settings).unwrap();
    let metrics = Arc::new(Metrics::new("bench"));
    let mut sink = ChSink::open(settings, metrics.clone()).unwrap();
    let t0 = now_ms();
    let rows: Vec<ChRow> = (0..n).map(|i| row(i, t0)).collect();
    let started = Instant::now();
    for chunk in rows.chunks(100_000) {
        sink.push(chunk.iter().cloned());
    }
    sink.flush();
    let acked = started.elapsed().as_secs_f64();
    assert_eq!(metrics.log_spooled.get(), 0, "nothing spooled");
    loop {
        if ask.count(&format!("SELECT count() FROM {db}.rampart_decisions")) >= n {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "rows never all arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (acked, started.elapsed().as_secs_f64())
}

fn cluster_vs_server() {
    let n = env("BENCH_CLUSTER_ROWS", 500_000);
    println!("\nrows into one server vs a 2 shards × 2 replicas cluster (same machine, same run):");
    let one = ClickHouseServer::start();
    one.query("CREATE DATABASE IF NOT EXISTS bench1").unwrap();
    let (a1, s1) = timed_insert(one.url(), None, "bench1", n, &one);
    drop(one);
    let mut c = ClickHouseCluster::start(2, 2);
    let url = c.node(0, 0).url();
    let (a2, s2) = timed_insert(url, Some("rampart".into()), "benchc", n, c.node(1, 1));
    let rate = |s: f64| n as f64 / s;
    println!(
        "  one server: {n} rows acknowledged at {:.0} rows/s, stored at {:.0} rows/s",
        rate(a1),
        rate(s1)
    );
    println!(
        "  cluster:    {n} rows acknowledged at {:.0} rows/s, in their shards at {:.0} rows/s",
        rate(a2),
        rate(s2)
    );
    println!(
        "  cluster / one server = {:.2} (acknowledged), {:.2} (stored)",
        a1 / a2,
        s1 / s2
    );
}
