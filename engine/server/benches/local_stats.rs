//! What the console's overview costs on the local decision log, measured in one run (`cargo bench
//! -p rampart --bench local_stats`):
//!
//! An hour of logged decisions (`BENCH_ROWS`, default 1,000,000 rows, ≈ 280 decisions/s, in
//! files of 64 MiB as the writer rotates them) is written into an engine's log directory. Then
//! the engine answers the overview's refresh — five `GET /admin/v1/stats` of the last hour
//! (`by=rule`, `challenge`, `country`, `isp`, `device_type`) — timed:
//!
//! 1. the first refresh, which builds the per-minute summary from the files;
//! 2. later refreshes, each after 2,000 more rows were appended (what 5 s of traffic at 400/s
//!    adds), from the summary;
//! 3. the same refreshes with `bucket_s=90`, which the summary cannot answer, so each scans the
//!    files as every refresh did before the summary existed.
//!
//! `BENCH_ROUNDS` (default 5) refreshes of each kind; the medians are printed.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{env, now_ms, temp_dir, Engine};

const FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Appends `n` rows with times spread evenly over `[t0, t1)` to the log in `dir`, starting a new
/// file whenever the current one would exceed 64 MiB.
fn write_rows(dir: &Path, seq: &mut u32, from_i: u64, n: u64, t0: i64, t1: i64) {
    let mut file: Option<(std::io::BufWriter<std::fs::File>, u64)> = None;
    for i in from_i..from_i + n {
        let t = t0 + ((t1 - t0) as f64 * (i - from_i) as f64 / n as f64) as i64;
        let refused = i % 10 == 0;
        let route = ["/api/orders", "/api/pay", "/api/login", "/api/search"][(i % 4) as usize];
        let country = ["CN", "US", "DE", "BR", "IN", "FR"][(i % 6) as usize];
        let isp = ["isp-a", "isp-b", "isp-c"][(i % 3) as usize];
        let device_type = ["ios", "android", "web"][(i % 3) as usize];
        let rule = ["ip-rate", "user-rate", "bad-reputation"][(i % 3) as usize];
        let row = json!({
            "time_ms": t, "decision_id": format!("{t:013x}-{i:016x}"), "app": "shop",
            "method": "POST",
            "route": route,
            "user": format!("u{}", i % 50_000), "ip": format!("81.2.{}.{}", (i / 256) % 256, i % 256),
            "device_id": format!("d{}", i % 40_000),
            "country": country, "isp": isp, "device_type": device_type,
            "user_agent": "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36",
            "ja3": "771,4865-4866-4867,0-23-65281,29-23-24,0",
            "tier": if refused { "gateway" } else { "" },
            "rule": if refused { rule } else { "" },
            "action": if refused { "deny" } else { "allow" },
            "code": if refused { "RATE_LIMITED" } else { "OK" },
            "status": if refused { 429 } else { 200 },
            "reasons": if refused { json!([{"tier": "gateway", "rule": "ip-rate", "message": "over the limit"}]) } else { json!([]) },
            "shadow": [], "ruleset_version": "3f9a61c0d2b87e45", "arm": "stable",
            "latency_us": 40 + (i * 7919) % 400, "degraded": false, "instance": "bench", "score": 0,
            "key_id": "k1", "challenge": "",
        })
        .to_string();
        if file
            .as_ref()
            .is_none_or(|(_, b)| b + row.len() as u64 + 1 > FILE_BYTES)
        {
            *seq += 1;
            let path = dir.join(format!("decisions-{t:013}-{seq:06}.jsonl"));
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            file = Some((std::io::BufWriter::new(f), 0));
        }
        let (w, bytes) = file.as_mut().unwrap();
        writeln!(w, "{row}").unwrap();
        *bytes += row.len() as u64 + 1;
    }
}

/// One overview refresh: the five stats calls, timed.
fn refresh(e: &Engine, extra: &str) -> Duration {
    let start = Instant::now();
    for by in ["rule", "challenge", "country", "isp", "device_type"] {
        let (st, v) = e.admin_get(&format!("/admin/v1/stats?by={by}{extra}"));
        assert_eq!(st, 200, "{v}");
        assert!(v["latency_us"]["n"].as_u64().unwrap() > 0, "{v}");
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rows = env("BENCH_ROWS", 1_000_000);
    let rounds = env("BENCH_ROUNDS", 5) as usize;
    let dir = temp_dir("bench-local-stats");
    let log = dir.join("stats-log");
    std::fs::create_dir_all(&log).unwrap();
    let now = now_ms();
    let mut seq = 0;
    let t = Instant::now();
    write_rows(&log, &mut seq, 0, rows, now - 3_600_000, now - 60_000);
    eprintln!("wrote {rows} rows in {:.1} s", t.elapsed().as_secs_f64());
    let engine = Engine::start(
        &dir,
        "stats",
        "[[apps]]\nid = \"shop\"\nsecret = \"bench\"\nwindow_ms = 60000\n[rules]\ndefaults = false\n",
    );
    let first = refresh(&engine, "");
    let mut next_i = rows;
    let mut summary = Vec::new();
    let mut scan = Vec::new();
    for _ in 0..rounds {
        let t = now_ms();
        write_rows(&log, &mut seq, next_i, 2_000, t - 5_000, t);
        next_i += 2_000;
        summary.push(refresh(&engine, ""));
        scan.push(refresh(&engine, "&bucket_s=90"));
    }
    let (s, f) = (median(summary), median(scan));
    println!("local_stats: {rows} rows over the last hour, overview refresh = 5 stats calls");
    println!(
        "  first refresh (builds the summary): {:>9.1} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "  refresh from the summary (median):  {:>9.1} ms",
        s.as_secs_f64() * 1e3
    );
    println!(
        "  refresh scanning the files (median):{:>9.1} ms",
        f.as_secs_f64() * 1e3
    );
    println!(
        "  scan / summary:                     {:>9.0}×",
        f.as_secs_f64() / s.as_secs_f64()
    );
}
