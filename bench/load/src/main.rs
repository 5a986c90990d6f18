//! `rampart-load`: the engine measured side by side with an actix-web hello-world baseline, by
//! the same generator on the same machine in the same run, so the figures are ratios that mean
//! something on any machine. Prints a report, writes `results.json`, `results.md` and SVG plots.
//!
//!   cargo run --release -p rampart-load -- --out docs/perf

mod cpu;
mod gen;
mod plot;
mod servers;
mod soak;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use gen::{Measured, Pace};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "rampart-load", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// The hello-world baseline server (started by the load run itself).
    #[command(hide = true)]
    Baseline {
        #[arg(long)]
        listen: String,
        #[arg(long, default_value_t = 2)]
        workers: usize,
    },
    /// Soak with faults: half load for a while, rule sets swapped, Redis and ClickHouse restarted.
    Soak(soak::SoakArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The engine binary (default: `rampart` beside this binary).
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The rule directory the rule-count runs are built from.
    #[arg(long, default_value = "rules")]
    rules: PathBuf,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Server workers (default: the number of the servers' cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Whether to pin the generator to one core and the servers to the others (on by default
    /// with two or more cores): sharing cores, the generator's own CPU would cap the baseline and
    /// make every server look close to it.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pin: bool,
    /// Rounds of the baseline and local-state measurements, taken in turn (baseline, engine,
    /// baseline, engine…); the round with the median engine/baseline ratio is reported (both of
    /// its rows), with every round's ratio. A shared machine drifts by 10% and more between
    /// measurements minutes apart; pairs taken seconds apart keep that drift out of the ratio.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Runs: baseline,local,empty,redis,clickhouse,rules,workers,memory (comma-separated);
    /// `empty` is the engine with an empty rule set (the anti-replay core, JSON, log, metrics).
    /// Also `fleet` (not in the default): three engines on one Redis behind nginx (round robin)
    /// against one engine behind the same nginx, alternating.
    #[arg(
        long,
        default_value = "baseline,local,empty,redis,clickhouse,rules,workers,memory"
    )]
    only: String,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    redis_url: Option<String>,
    /// Where the Redis this run starts runs: `servers` (beside the engine, on the servers'
    /// cores), `generator` (on the generator's core, which the Redis run leaves mostly idle: the
    /// nearest this machine has to Redis on a host of its own), or `both` (two Redis rows).
    #[arg(long, default_value = "servers")]
    redis_core: String,
    /// Whether the Redis engine shares writes between concurrent decisions (`[state]
    /// redis_coalesce`): `on`, `off`, or `both` (the row without coalescing first, then with it:
    /// the before and after in one run).
    #[arg(long, default_value = "both")]
    redis_coalesce: String,
    /// Use this ClickHouse (HTTP URL) instead of starting one.
    #[arg(long)]
    clickhouse_url: Option<String>,
    /// Only drive this running engine (host:port) and print what was measured.
    #[arg(long)]
    against: Option<std::net::SocketAddr>,
    /// Where to write results.json, results.md and the plots.
    #[arg(long, default_value = "docs/perf")]
    out: PathBuf,
}

/// One measured server: its maximum rate (closed loop) and its latency at half of it.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    max: Measured,
    half: Measured,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "rps": self.max.rps().round(),
            "max_p50_us": self.max.pct(0.5), "max_p99_us": self.max.pct(0.99),
            "half_rate": (self.max.rps() / 2.0).round(),
            "half_rps": self.half.rps().round(),
            "half_p50_us": self.half.pct(0.5), "half_p99_us": self.half.pct(0.99),
            "half_p999_us": self.half.pct(0.999),
            "half_generator_lag_p99_us": self.half.lag_pct(0.99),
            "errors": self.max.errors + self.half.errors,
            "codes": self.max.codes,
            "generator_cpu": (self.max.generator_load() * 1000.0).round() / 1000.0,
            "generator_saturated": self.max.generator_saturated(),
            "server_cpu_us_per_request": self.max.server_us_per_request().map(|u| (u * 10.0).round() / 10.0),
        })
    }
}

/// Measures the server at `addr` (process `pid`, whose CPU time is read when given).
fn measure(name: &str, addr: std::net::SocketAddr, pid: Option<u32>, a: &RunArgs) -> Row {
    let d = Duration::from_secs_f64(a.seconds);
    // Warm up: connections, caches, the JIT-free but allocation-heavy first seconds.
    let _ = gen::run(
        addr,
        a.connections,
        Duration::from_secs(1),
        Pace::Closed,
        None,
    );
    let max = gen::run(addr, a.connections, d, Pace::Closed, pid);
    let half = gen::run(
        addr,
        a.connections,
        d,
        Pace::Open {
            rate: max.rps() / 2.0,
        },
        None,
    );
    let row = Row {
        name: name.to_string(),
        max,
        half,
    };
    eprintln!(
        "  {:<28} {:>9.0} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs | at half: p50 {:>5.0} µs  p99 {:>6.0} µs  errors {}",
        row.name,
        row.max.rps(),
        row.max.pct(0.5),
        row.max.pct(0.99),
        row.half.pct(0.5),
        row.half.pct(0.99),
        row.max.errors + row.half.errors
    );
    eprintln!(
        "  {:<28} server CPU {} µs/request; generator at max {:.0}% of its core{}; wake-up lag at half: p50 {:.0} µs  p99 {:.0} µs",
        "",
        row.max
            .server_us_per_request()
            .map_or("?".into(), |u| format!("{u:.1}")),
        row.max.generator_load() * 100.0,
        if row.max.generator_saturated() {
            " (SATURATED: this rate is the generator's)"
        } else {
            ""
        },
        row.half.lag_pct(0.5),
        row.half.lag_pct(0.99)
    );
    row
}

/// The engine configuration of a run.
fn config(workers: usize, rules: Option<&Path>, extra: &str) -> String {
    let rules = match rules {
        Some(d) => format!("[rules]\ndir = \"{}\"\nreload = false\n", d.display()),
        None => String::new(),
    };
    format!(
        "[server]\nworkers = {workers}\n\n[[apps]]\nid = \"{}\"\nsecret = \"{}\"\nwindow_ms = 5000\n\n{rules}{extra}",
        gen::APP,
        std::str::from_utf8(gen::SECRET).expect("ascii secret"),
    )
}

/// Three engines on one Redis behind nginx (round robin) against one engine behind the same kind
/// of nginx, in alternating rounds, all on the servers' cores: what spreading decisions over a
/// fleet costs per decision (an nginx hop either way; more processes on the same cores). On a
/// machine whose servers share one or two cores this is not a scaling figure — three engines get
/// no more CPU than one.
fn fleet(
    bin: &Path,
    tmp: &Path,
    workers: usize,
    a: &RunArgs,
    dl: &dyn Fn(&str) -> String,
    report: &mut Value,
) {
    let started;
    let url = match &a.redis_url {
        Some(u) => u.clone(),
        None => {
            started = servers::redis(tmp, false);
            match &started {
                Some(r) => format!("redis://{}", r.addr),
                None => {
                    eprintln!("  (no redis-server: the fleet run is skipped)");
                    return;
                }
            }
        }
    };
    let engine = |name: &str| {
        servers::engine(
            bin,
            tmp,
            name,
            &config(
                workers,
                None,
                &format!(
                    "{}[state]\nbackend = \"redis\"\nredis_url = \"{url}\"\nredis_prefix = \"load\"\n",
                    dl(name)
                ),
            ),
        )
    };
    let engines: Vec<_> = ["fleet-0", "fleet-1", "fleet-2"]
        .iter()
        .map(|n| engine(n))
        .collect();
    let addrs: Vec<std::net::SocketAddr> = engines.iter().map(|e| e.addr).collect();
    let (Some(three), Some(one)) = (
        servers::nginx(tmp, "three", &addrs),
        servers::nginx(tmp, "one", &addrs[..1]),
    ) else {
        eprintln!("  (no nginx: the fleet run is skipped)");
        return;
    };
    eprintln!("fleet: three engines on one Redis behind nginx vs one engine behind nginx:");
    let mut rounds = Vec::new();
    for round in 1..=a.rounds.max(1) {
        let r1 = measure("one engine behind nginx", one.addr, None, a);
        let r3 = measure("three engines behind nginx", three.addr, None, a);
        let ratio = r3.max.rps() / r1.max.rps();
        eprintln!(
            "  round {round}: one {:.0} req/s, three {:.0} req/s, three / one = {ratio:.2}",
            r1.max.rps(),
            r3.max.rps()
        );
        rounds.push(json!({
            "one_rps": r1.max.rps().round(), "three_rps": r3.max.rps().round(),
            "three_vs_one": (ratio * 1000.0).round() / 1000.0,
            "errors": r1.max.errors + r3.max.errors,
        }));
    }
    report["fleet"] = json!(rounds);
}

/// A rule directory with `n` rules: the repository's rules (the first `n` when `n` is smaller),
/// then business rules scoped to routes of their own, as a large real set is (each campaign,
/// endpoint or partner has its rules).
fn rule_dir(src: &Path, dst: &Path, n: usize) -> std::io::Result<PathBuf> {
    let out = dst.join(format!("rules-{n}"));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(out.join("lists"))?;
    for e in std::fs::read_dir(src.join("lists"))? {
        let e = e?;
        std::fs::copy(e.path(), out.join("lists").join(e.file_name()))?;
    }
    let mut count = 0;
    for tier in ["edge", "gateway", "business"] {
        std::fs::create_dir_all(out.join(tier))?;
        let mut files: Vec<_> = std::fs::read_dir(src.join(tier))?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "rhai"))
            .collect();
        files.sort_by_key(|e| e.file_name());
        for f in files {
            if count < n {
                std::fs::copy(f.path(), out.join(tier).join(f.file_name()))?;
                count += 1;
            }
        }
    }
    for i in count..n {
        let text = format!(
            "//! name: campaign-{i}\n//! priority: {}\n//! owner: growth\n//! description: Campaign {i}: large orders from new devices need review.\n//! routes: /api/campaign-{i}/*\nif req.param(\"qty\") > 50 && req.header(\"x-device-attested\") == \"\" {{\n    score(40, \"campaign {i}: bulk order\")\n}}\n",
            100 + i % 800
        );
        std::fs::write(
            out.join("business").join(format!("campaign-{i}.rhai")),
            text,
        )?;
    }
    Ok(out)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Baseline { listen, workers }) => {
            return match servers::serve_baseline(&listen, workers) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("baseline: {e}");
                    std::process::ExitCode::from(2)
                }
            };
        }
        Some(Cmd::Soak(s)) => return soak::run(s),
        None => {}
    }
    let a = cli.run;
    if let Some(addr) = a.against {
        let r = measure(&addr.to_string(), addr, None, &a);
        println!(
            "{}",
            serde_json::to_string_pretty(&r.json()).unwrap_or_default()
        );
        return std::process::ExitCode::SUCCESS;
    }
    let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
    let want = |x: &str| only.contains(&x);
    let bin = a.engine.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("rampart")
    });
    if !bin.exists() {
        eprintln!(
            "rampart-load: no engine binary at {} (build it: cargo build --release -p rampart)",
            bin.display()
        );
        return std::process::ExitCode::from(2);
    }
    let placement = match cpu::set(cpu::Placement::new(a.pin)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rampart-load: cannot pin the generator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // The servers' cores: every core but the generator's when pinned.
    let cores = placement.servers.len().max(1);
    let workers = a.workers.unwrap_or(cores);
    let tmp = std::env::temp_dir().join(format!("rampart-load-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("a temporary directory");
    let dl = |name: &str| {
        format!(
            "[decision_log]\ndir = \"{}\"\n",
            tmp.join(format!("log-{name}")).display()
        )
    };
    eprintln!(
        "rampart-load: {}; {cores} server core(s), {workers} server workers, {} connections, {} s per measurement; generator: 1 thread",
        placement.describe(),
        a.connections,
        a.seconds
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut report = json!({
        "cores": cores, "workers": workers, "connections": a.connections, "seconds": a.seconds,
        "placement": placement.describe(), "pinned": placement.generator.is_some(),
    });

    if want("baseline") || want("local") || want("empty") || want("redis") || want("clickhouse") {
        let b = servers::baseline(workers);
        let e = want("local")
            .then(|| servers::engine(&bin, &tmp, "local", &config(workers, None, &dl("local"))));
        let z = want("empty").then(|| {
            let dir = tmp.join("rules-empty");
            std::fs::create_dir_all(&dir).expect("an empty rule directory");
            servers::engine(
                &bin,
                &tmp,
                "empty",
                &config(workers, Some(&dir), &dl("empty")),
            )
        });
        let (mut bs, mut es, mut zs) = (Vec::new(), Vec::new(), Vec::new());
        // Rounds matter only for the ratios: without an engine, one baseline run.
        let rounds = if e.is_some() || z.is_some() {
            a.rounds.max(1)
        } else {
            1
        };
        for round in 1..=rounds {
            if rounds > 1 {
                eprintln!("round {round} of {rounds}:");
            }
            bs.push(measure("baseline (actix hello world)", b.addr, b.pid(), &a));
            if let Some(e) = &e {
                es.push(measure("engine, local state", e.addr, e.pid(), &a));
            }
            if let Some(z) = &z {
                zs.push(measure("engine, no rules", z.addr, z.pid(), &a));
            }
        }
        let ratio = |b: &Row, e: &Row| (e.max.rps() / b.max.rps() * 1000.0).round() / 1000.0;
        let local: Vec<f64> = bs.iter().zip(&es).map(|(b, e)| ratio(b, e)).collect();
        let empty: Vec<f64> = bs.iter().zip(&zs).map(|(b, z)| ratio(b, z)).collect();
        if !local.is_empty() {
            eprintln!("  local state vs baseline, round by round: {local:?}");
        }
        if !empty.is_empty() {
            eprintln!("  no rules vs baseline, round by round: {empty:?}");
        }
        if bs.iter().any(|b| b.max.generator_saturated()) {
            eprintln!(
                "  WARNING: the generator saturated its core while measuring the baseline: the \
                 ratios above are upper bounds (the baseline measured the generator)"
            );
        }
        report["rounds"] = json!((0..bs.len())
            .map(|i| json!({
                "baseline_rps": bs[i].max.rps().round(),
                "baseline_generator_cpu": (bs[i].max.generator_load() * 1000.0).round() / 1000.0,
                "local_rps": es.get(i).map(|e| e.max.rps().round()),
                "vs_baseline": local.get(i),
                "empty_rps": zs.get(i).map(|z| z.max.rps().round()),
                "empty_vs_baseline": empty.get(i),
            }))
            .collect::<Vec<_>>());
        // The round with the median ratio (of the default rules, else of no rules), all of its
        // rows: ratios of measurements taken a few seconds apart.
        let by = if local.is_empty() { &empty } else { &local };
        let mut order: Vec<usize> = (0..by.len()).collect();
        order.sort_by(|&x, &y| by[x].total_cmp(&by[y]));
        let mid = order.get(order.len() / 2).copied().unwrap_or(0);
        if !by.is_empty() {
            eprintln!("  reported: round {} (the median ratio)", mid + 1);
            report["reported_round"] = json!(mid + 1);
        }
        rows.push(bs.swap_remove(mid));
        if !es.is_empty() {
            rows.push(es.swap_remove(mid));
        }
        if !zs.is_empty() {
            rows.push(zs.swap_remove(mid));
        }
    }
    // The local engine's rate in this run (the Redis run is compared with it).
    let local_rps = rows
        .iter()
        .find(|r| r.name == "engine, local state")
        .map(|r| r.max.rps());
    let redis_cores: &[bool] = match (a.redis_url.is_some(), a.redis_core.as_str()) {
        (true, _) | (false, "servers") => &[false],
        (false, "generator") => &[true],
        _ => &[false, true],
    };
    let coalesce: &[bool] = match a.redis_coalesce.as_str() {
        "on" => &[true],
        "off" => &[false],
        _ => &[false, true],
    };
    let redis_runs: Vec<(bool, bool)> = redis_cores
        .iter()
        .flat_map(|&g| coalesce.iter().map(move |&c| (g, c)))
        .filter(|_| want("redis"))
        .collect();
    for (on_generator, coalescing) in redis_runs {
        let started;
        let url = match &a.redis_url {
            Some(u) => Some(u.clone()),
            None => {
                started = servers::redis(&tmp, on_generator);
                started.as_ref().map(|r| format!("redis://{}", r.addr))
            }
        };
        let (name, key) = if on_generator {
            (
                "engine, Redis state (Redis on the generator's core)",
                "redis_costs_redis_on_generator_core",
            )
        } else {
            ("engine, Redis state", "redis_costs")
        };
        let (name, key) = if coalescing {
            (name.to_string(), key.to_string())
        } else {
            (
                format!("{name}, no coalescing"),
                format!("{key}_no_coalescing"),
            )
        };
        let (name, key) = (name.as_str(), key.as_str());
        match url {
            Some(url) => {
                let redis_addr: Option<std::net::SocketAddr> = url
                    .strip_prefix("redis://")
                    .and_then(|a| a.split('/').next())
                    .and_then(|a| a.parse().ok());
                // The engine's defaults for the Redis backend: one worker per core, decisions
                // waiting on Redis on their own pool (`[state] decision_threads`).
                let cfg = config(
                    workers,
                    None,
                    &format!(
                        "{}[state]\nbackend = \"redis\"\nredis_url = \"{url}\"\nredis_coalesce = {coalescing}\n",
                        dl("redis")
                    ),
                );
                let e = servers::engine(&bin, &tmp, "redis", &cfg);
                // What a decision costs Redis over the whole measurement (warm-up, maximum, half
                // load): blocking round trips from the engine's own counter, Redis's CPU from
                // `INFO cpu`, both divided by the decisions the engine counted.
                let sample = || {
                    (
                        servers::engine_metric(e.addr, "rampart_decisions_total"),
                        servers::engine_metric(e.addr, "rampart_redis_calls_total"),
                        redis_addr.and_then(servers::redis_cpu_us),
                        servers::engine_metric(e.addr, "rampart_redis_coalesced_writes_total"),
                        servers::engine_metric(e.addr, "rampart_redis_coalesced_commands_total"),
                    )
                };
                let before = sample();
                let stats_before = redis_addr.and_then(servers::redis_commandstats);
                let row = measure(name, e.addr, e.pid(), &a);
                let after = sample();
                let stats_after = redis_addr.and_then(servers::redis_commandstats);
                if let (
                    (Some(d0), Some(c0), Some(r0), w0, s0),
                    (Some(d1), Some(c1), Some(r1), w1, s1),
                ) = (before, after)
                {
                    let n = (d1 - d0).max(1.0);
                    let (trips, cpu) = ((c1 - c0) / n, (r1 - r0) / n);
                    let vs_local = local_rps.map(|l| row.max.rps() / l);
                    // Scripts per write: how many decisions' scripts each coalesced write carried.
                    let per_write = match (w0, w1, s0, s1) {
                        (Some(w0), Some(w1), Some(s0), Some(s1)) if w1 > w0 => {
                            Some((s1 - s0) / (w1 - w0))
                        }
                        _ => None,
                    };
                    eprintln!(
                        "  {:<28} per decision: {trips:.2} blocking round trips, Redis CPU {cpu:.1} µs; \
                         Redis/local throughput {}{}",
                        "",
                        vs_local.map_or("?".into(), |v| format!("{:.1}%", v * 100.0)),
                        per_write.map_or(String::new(), |p| format!(
                            "; {p:.1} decisions' scripts per write"
                        ))
                    );
                    // Where Redis's CPU went: each command's own time (`INFO commandstats`);
                    // the rest is the event loop's reading, writing and waking up.
                    let mut by_command = Vec::new();
                    if let (Some(b), Some(a)) = (&stats_before, &stats_after) {
                        for (name, calls, usec) in a {
                            let (c0, u0) = b
                                .iter()
                                .find(|(n, ..)| n == name)
                                .map_or((0.0, 0.0), |(_, c, u)| (*c, *u));
                            let (dc, du) = (calls - c0, usec - u0);
                            if dc > 0.0 && dc / n >= 0.01 {
                                by_command.push((name.clone(), dc / n, du / dc));
                            }
                        }
                    }
                    by_command.sort_by(|x, y| (y.1 * y.2).total_cmp(&(x.1 * x.2)));
                    let inside: f64 = by_command.iter().map(|(_, c, u)| c * u).sum();
                    eprintln!(
                        "  {:<28} inside commands {inside:.1} µs per decision: {}",
                        "",
                        by_command
                            .iter()
                            .map(|(name, c, u)| format!("{name} {c:.2} × {u:.1} µs"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    report[key] = json!({
                        "round_trips_per_decision": (trips * 100.0).round() / 100.0,
                        "redis_cpu_us_per_decision": (cpu * 10.0).round() / 10.0,
                        "redis_command_us_per_decision": (inside * 10.0).round() / 10.0,
                        "by_command": by_command.iter().map(|(name, c, u)| json!({
                            "command": name,
                            "per_decision": (c * 100.0).round() / 100.0,
                            "us_each": (u * 10.0).round() / 10.0,
                        })).collect::<Vec<_>>(),
                        "vs_local": vs_local.map(|v| (v * 1000.0).round() / 1000.0),
                        "coalesce": coalescing,
                        "scripts_per_write": per_write.map(|p| (p * 10.0).round() / 10.0),
                    });
                }
                rows.push(row);
            }
            None => eprintln!("  (no redis-server: the Redis run is skipped)"),
        }
    }
    if want("clickhouse") {
        let started;
        let url = match &a.clickhouse_url {
            Some(u) => Some(u.clone()),
            None => {
                started = servers::clickhouse(&tmp);
                started.as_ref().map(|c| format!("http://{}", c.addr))
            }
        };
        match url {
            Some(url) => {
                let cfg = config(
                    workers,
                    None,
                    &format!("{}clickhouse_url = \"{url}\"\n", dl("ch")),
                );
                let e = servers::engine(&bin, &tmp, "clickhouse", &cfg);
                rows.push(measure(
                    "engine, local + ClickHouse log",
                    e.addr,
                    e.pid(),
                    &a,
                ));
            }
            None => eprintln!("  (no clickhouse-server: the ClickHouse run is skipped)"),
        }
    }
    if want("fleet") {
        fleet(&bin, &tmp, workers, &a, &dl, &mut report);
    }
    let base_rps = rows
        .iter()
        .find(|r| r.name.starts_with("baseline"))
        .map(|r| r.max.rps());
    if !rows.is_empty() {
        report["servers"] = json!(rows
            .iter()
            .map(|r| {
                let mut j = r.json();
                if let Some(b) = base_rps {
                    j["vs_baseline"] = json!((r.max.rps() / b * 1000.0).round() / 1000.0);
                }
                j
            })
            .collect::<Vec<_>>());
    }

    let mut rule_rows = Vec::new();
    if want("rules") {
        eprintln!("rule count (local state):");
        for n in [1usize, 20, 100, 500] {
            let dir = rule_dir(&a.rules, &tmp, n).expect("write a rule directory");
            let e = servers::engine(
                &bin,
                &tmp,
                &format!("rules-{n}"),
                &config(workers, Some(&dir), &dl(&format!("rules-{n}"))),
            );
            let r = measure(&format!("{n} rules"), e.addr, e.pid(), &a);
            rule_rows.push((n, r));
        }
        let r20 = rule_rows
            .iter()
            .find(|(n, _)| *n == 20)
            .map(|(_, r)| r.max.rps());
        report["rules"] = json!(rule_rows
            .iter()
            .map(|(n, r)| {
                let mut j = r.json();
                j["rules"] = json!(n);
                if let Some(b) = r20 {
                    j["vs_20"] = json!((r.max.rps() / b * 1000.0).round() / 1000.0);
                }
                j
            })
            .collect::<Vec<_>>());
    }
    let mut worker_rows = Vec::new();
    if want("workers") {
        eprintln!("server workers (local state, default rules; baseline alongside):");
        for w in 1..=cores.max(2) {
            let b = servers::baseline(w);
            let rb = measure(&format!("baseline, {w} worker(s)"), b.addr, b.pid(), &a);
            drop(b);
            let e = servers::engine(
                &bin,
                &tmp,
                &format!("workers-{w}"),
                &config(w, None, &dl(&format!("w{w}"))),
            );
            let re = measure(&format!("engine, {w} worker(s)"), e.addr, e.pid(), &a);
            worker_rows.push((w, rb, re));
        }
        report["workers"] = json!(worker_rows.iter().map(|(w, b, e)| json!({
            "workers": w, "baseline_rps": b.max.rps().round(), "engine_rps": e.max.rps().round(),
            "vs_baseline": (e.max.rps() / b.max.rps() * 1000.0).round() / 1000.0,
        })).collect::<Vec<_>>());
    }
    let mut mem_rows = Vec::new();
    if want("memory") {
        eprintln!("memory after start-up vs expected rate × window (bloom nonce filter):");
        for window_ms in [5_000i64, 30_000, 120_000] {
            for rps in [10_000u64, 100_000, 1_000_000] {
                let cfg = format!(
                    "[server]\nworkers = 1\n\n[[apps]]\nid = \"m\"\nsecret = \"x\"\nwindow_ms = {window_ms}\n\n[state]\nexpected_rps = {rps}\n\n{}",
                    dl(&format!("m{rps}-{window_ms}"))
                );
                let e = servers::engine(&bin, &tmp, &format!("mem-{rps}-{window_ms}"), &cfg);
                std::thread::sleep(Duration::from_millis(300));
                let rss = e.rss_bytes().unwrap_or(0);
                eprintln!(
                    "  {rps:>9} req/s × ±{:>3} s: {:>7.1} MiB",
                    window_ms / 1000,
                    rss as f64 / 1048576.0
                );
                mem_rows.push((rps, window_ms, rss));
            }
        }
        report["memory"] = json!(mem_rows
            .iter()
            .map(|(r, w, m)| json!({
                "expected_rps": r, "window_ms": w, "rss_bytes": m
            }))
            .collect::<Vec<_>>());
    }

    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        eprintln!("rampart-load: {}: {e}", a.out.display());
        return std::process::ExitCode::from(2);
    }
    let md = plot::write_all(&a.out, &rows, &rule_rows, &worker_rows, &mem_rows, base_rps);
    let _ = std::fs::write(
        a.out.join("results.json"),
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    );
    let _ = std::fs::write(a.out.join("results.md"), &md);
    println!("{md}");
    eprintln!(
        "written: {}/results.json, results.md and *.svg",
        a.out.display()
    );
    std::process::ExitCode::SUCCESS
}
