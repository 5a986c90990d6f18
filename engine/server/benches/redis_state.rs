//! Shared state on a real Redis, measured side by side in one run (`cargo bench -p rampart --bench
//! redis_state`; needs `redis-server` on the PATH — `scripts/test.sh` installs it):
//!
//! 1. **Memory per nonce**, compact (`bloom`) vs exact (`SET NX PX`), on the same Redis, at the
//!    same rate and retention, from `INFO memory` before and after; plus the false positives seen
//!    when probing fresh nonces against the full Bloom filter.
//! 2. **Decisions per second** through the whole decision path (default rules, no HTTP) with local
//!    state and with Redis state, from the same number of threads.
//!
//! Environment: `BENCH_RATE` (nonces/s, default 20000), `BENCH_RETENTION_MS` (default 10000),
//! `BENCH_SECONDS` (per decision run, default 3), `BENCH_THREADS` (default 16).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart::config::Config;
use rampart::redis_state::{BloomLayout, NonceMode, Redis, RedisCounters, RedisNonces};
use rampart::runtime::Runtime;
use rampart_core::model::DecideRequest;
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::nonce::{NonceStore, NonceVerdict};
use support::{env, now_ms, temp_dir, Call, RedisServer};

fn settings(url: &str, prefix: &str) -> rampart::redis_state::RedisSettings {
    rampart::redis_state::RedisSettings {
        url: url.into(),
        cluster_nodes: vec![],
        prefix: prefix.into(),
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
        connections: 2,
        replica_acks: 0,
        replica_ack_timeout: std::time::Duration::from_millis(50),
        coalesce: true,
    }
}

/// Inserts `n` nonces arriving at `rate`/s (simulated clock: timestamps advance with the count, so
/// the live set is exactly rate × retention however fast Redis is) from 8 threads.
fn fill(store: &Arc<RedisNonces>, n: u64, rate: u64, t0: i64, tag: &str) -> u64 {
    let replays = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let ts = t0 + (i * 1000 / rate) as i64;
                let nonce = format!("{tag}-{i:016x}-bench");
                match store.check_and_insert("shop", &nonce, ts, 5_000, ts) {
                    Ok(NonceVerdict::Replay) => {
                        replays.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            });
        }
    });
    replays.into_inner()
}

fn memory_per_nonce(redis: &RedisServer) -> (f64, f64) {
    let rate = env("BENCH_RATE", 20_000);
    let retention = env("BENCH_RETENTION_MS", 10_000) as i64;
    let n = rate * retention as u64 / 1000;
    let cfg = SlicedBloomConfig {
        expected_rps: rate,
        slice_ms: (retention / 48).max(1),
        retention_ms: retention,
        max_window_ms: retention / 2,
        target_fp: 1e-6,
    };
    println!(
        "memory per nonce: {n} live nonces ({rate}/s × {retention} ms retention), target FP 1e-6"
    );
    let mut per = [0.0f64; 2];
    for (i, mode) in ["exact", "bloom"].into_iter().enumerate() {
        assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
        std::thread::sleep(Duration::from_millis(200));
        let before = redis.used_memory();
        let r = Redis::start(&settings(&redis.url(), mode), RedisCounters::default()).unwrap();
        let layout = BloomLayout::new(&cfg, 16);
        let nonce_mode = if mode == "exact" {
            NonceMode::Exact
        } else {
            NonceMode::Bloom(vec![("shop".to_string(), layout)])
        };
        // A long margin keeps every key alive until it is measured (it changes no size).
        let store = Arc::new(RedisNonces::new(r, nonce_mode, retention, 600_000));
        let t0 = now_ms();
        let started = Instant::now();
        let replays = fill(&store, n, rate, t0, mode);
        let took = started.elapsed();
        let with_tokens = redis.used_memory();
        // The compact mode's token keys live 2 × the call timeout + 100 ms (`[state]
        // redis_timeout_ms`): what they hold is the insert rate times that, whatever the
        // window, so it is measured apart from the nonces' own memory (after they expired).
        let token_ttl = 2 * settings(&redis.url(), mode).timeout + Duration::from_millis(100);
        std::thread::sleep(token_ttl + Duration::from_millis(500));
        let after = redis.used_memory();
        per[i] = (after.saturating_sub(before)) as f64 / n as f64;
        let tokens = with_tokens.saturating_sub(after) as f64;
        let mut line = format!(
            "  {mode:<5}  {:>8.2} bytes/nonce  ({:.1} MiB)  inserted at {:.0}/s",
            per[i],
            (after - before) as f64 / (1 << 20) as f64,
            n as f64 / took.as_secs_f64()
        );
        if mode == "bloom" {
            // Token keys alive when the fill ended: the last token TTL's inserts.
            let alive = (n as f64 / took.as_secs_f64() * token_ttl.as_secs_f64()).min(n as f64);
            line.push_str(&format!(
                "; token keys {:.0} B each (at the default 200 ms timeout and this rate: \
                 {:.1} B per live nonce)",
                tokens / alive,
                tokens / alive * rate as f64 * 0.5 / n as f64
            ));
        }
        assert_eq!(
            replays, 0,
            "a fresh nonce was judged a replay while filling"
        );
        if mode == "bloom" {
            // Fresh nonces probed against the full filter, spread over every slice (10% more
            // load): every "replay" answer is a false positive.
            let probes = n / 10;
            let fp = fill(
                &store,
                probes,
                probes * 1000 / retention as u64,
                t0,
                "probe",
            );
            line.push_str(&format!(
                "  layout: {} shards × {} bits, k = {}; false positives {fp}/{probes}",
                layout.shards, layout.bits_per_shard, layout.k
            ));
        }
        println!("{line}");
    }
    println!(
        "  exact / bloom = {:.1}× (target ≥ 20×)",
        per[0] / per[1].max(f64::MIN_POSITIVE)
    );
    (per[0], per[1])
}

fn runtime(dir: &std::path::Path, state: &str) -> Arc<Runtime> {
    let cfg = dir.join(format!("{}.toml", state.len()));
    std::fs::write(
        &cfg,
        format!(
            "[[apps]]\nid = \"shop\"\nsecret = \"bench\"\nwindow_ms = 5000\n\
             [decision_log]\ndir = \"{}\"\n[state]\n{state}\n",
            dir.join("log").display()
        ),
    )
    .unwrap();
    let v = Config::load(Some(&cfg)).unwrap().validate().unwrap();
    Runtime::build(v).unwrap_or_else(|e| panic!("{e}"))
}

fn decisions_per_second(rt: &Arc<Runtime>, tag: &str) -> f64 {
    decisions_per_second_on(rt, tag, env("BENCH_THREADS", 16))
}

fn decisions_per_second_on(rt: &Arc<Runtime>, tag: &str, threads: u64) -> f64 {
    let seconds = env("BENCH_SECONDS", 3);
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    let seq = AtomicU64::new(0);
    let first = std::sync::Mutex::new(String::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = seq.fetch_add(1, Ordering::Relaxed);
                    let user = format!("u{}", i % 5000);
                    let ip = format!(
                        "81.{}.{}.{}",
                        (i / 65536) % 200 + 1,
                        (i / 256) % 256,
                        i % 256
                    );
                    let c = Call {
                        app: "shop",
                        secret: b"bench",
                        path: "/api/orders",
                        body: format!("{{\"sku\":\"A{}\",\"qty\":1}}", i % 97),
                        user: &user,
                        ip: &ip,
                        device: &user,
                        nonce: format!("{tag}-{i:016x}-n"),
                        ts_ms: now_ms(),
                        params: serde_json::Value::Null,
                    };
                    let req: DecideRequest = serde_json::from_value(c.json()).unwrap();
                    let v = rt.engine.decide(&req, now_ms()).unwrap();
                    if v.code != rampart_core::Code::Ok
                        && refused.fetch_add(1, Ordering::Relaxed) == 0
                    {
                        *first.lock().unwrap() = format!("{:?}", v.code);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let n = done.into_inner();
    let rps = n as f64 / seconds as f64;
    println!(
        "  {tag:<12} {rps:>9.0} decisions/s  ({n} decisions, {} refused, the first by {}; {threads} threads)",
        refused.into_inner(),
        first.into_inner().unwrap()
    );
    rps
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run only checks it builds.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // `BENCH_ONLY=memory`, `acks` or `coalesce`: that section alone.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let dir = temp_dir("bench-redis");
    if only == "memory" {
        memory_per_nonce(&RedisServer::start());
    }
    if only.is_empty() {
        memory_and_throughput(&dir);
    }
    if only.is_empty() || only == "acks" {
        replica_acks_cost(&dir);
    }
    if only.is_empty() || only == "coalesce" {
        coalescing_cost(&dir);
    }
}

/// Redis's CPU time so far (user + system, µs), from `INFO cpu`.
fn redis_cpu_us(redis: &RedisServer) -> f64 {
    redis
        .cli(&["INFO", "cpu"])
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            matches!(k, "used_cpu_sys" | "used_cpu_user").then(|| v.parse::<f64>().ok())?
        })
        .sum::<f64>()
        * 1e6
}

fn coalescing_cost(dir: &std::path::Path) {
    // 4. What sharing writes between concurrent decisions (`[state] redis_coalesce`) saves Redis:
    //    the same decisions from the same threads, with and without, alternating.
    let threads = env("BENCH_THREADS", 16);
    println!(
        "\nconcurrent decisions' scripts in shared writes (state.redis_coalesce), default rules, \
         {threads} threads, alternating:"
    );
    let redis = RedisServer::start();
    let url = redis.url();
    let seconds = env("BENCH_SECONDS", 3) as f64;
    for round in 1..=3 {
        let mut out = [(0.0, 0.0); 2];
        for on in [false, true] {
            let rt = runtime(
                dir,
                &format!(
                    "backend = \"redis\"\nredis_url = \"{url}\"\nredis_coalesce = {on}\n\
                     redis_prefix = \"co{on}r{round}\""
                ),
            );
            let before = redis_cpu_us(&redis);
            let rps = decisions_per_second_on(&rt, &format!("co{on}r{round}"), threads);
            let cpu = (redis_cpu_us(&redis) - before) / (rps * seconds).max(1.0);
            out[on as usize] = (rps, cpu);
        }
        println!(
            "    round {round}: decisions/s {:.0} → {:.0} ({:.2}×); Redis CPU per decision {:.1} → \
             {:.1} µs",
            out[0].0,
            out[1].0,
            out[1].0 / out[0].0.max(1.0),
            out[0].1,
            out[1].1
        );
    }
}

fn memory_and_throughput(dir: &std::path::Path) {
    let redis = RedisServer::start();
    memory_per_nonce(&redis);

    println!("\ndecisions per second, whole decision path with the default rules (no HTTP):");
    let local = decisions_per_second(&runtime(dir, "backend = \"local\""), "local");
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let url = redis.url();
    for mode in ["bloom", "exact"] {
        let rt = runtime(
            dir,
            &format!("backend = \"redis\"\nredis_url = \"{url}\"\nnonce_mode = \"{mode}\"\nredis_connections = 2"),
        );
        let rps = decisions_per_second(&rt, &format!("redis-{mode}"));
        println!("    redis-{mode} / local = {:.2}", rps / local);
    }
}

fn replica_acks_cost(dir: &std::path::Path) {
    // 3. What `[state] replica_acks = 1` costs: every anti-replay write is followed by a `WAIT`
    //    for one replica (one more round trip, plus the replica's acknowledgement).
    println!(
        "\nanti-replay writes acknowledged by a replica (state.replica_acks), one master + one \
         replica, default rules, alternating:"
    );
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    let url = primary.url();
    let threads = env("BENCH_THREADS", 16);
    for round in 1..=2 {
        for (n, what) in [(1, "one thread"), (threads, "threads")] {
            let mut rates = [0.0; 2];
            for acks in [0u32, 1] {
                let rt = runtime(
                    dir,
                    &format!(
                        "backend = \"redis\"\nredis_url = \"{url}\"\nreplica_acks = {acks}\n\
                         replica_ack_timeout_ms = 100\nredis_prefix = \"acks{acks}r{round}n{n}\""
                    ),
                );
                rates[acks as usize] =
                    decisions_per_second_on(&rt, &format!("acks{acks}r{round}n{n}"), n);
            }
            println!(
                "    round {round}, {what} ({n}): replica_acks = 1 / 0 = {:.2}; {:.0} → {:.0} µs \
                 per decision per thread",
                rates[1] / rates[0],
                1e6 * n as f64 / rates[0],
                1e6 * n as f64 / rates[1]
            );
        }
    }
}
