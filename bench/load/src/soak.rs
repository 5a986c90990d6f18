//! `rampart-load soak`: the engine on Redis state with the ClickHouse log, at half of its measured
//! maximum rate for a while, with its rule set swapped on disk every `--swap-every` seconds
//! (hot reload) and Redis and ClickHouse each restarted once. Reports memory over time, decisions
//! served against rows logged, and every failed request by cause; exits 1 when rows and decisions
//! differ, when a request fails other than by a declared store policy, or when memory keeps
//! growing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::gen::{self, Pace};
use crate::servers;

#[derive(clap::Args)]
pub struct SoakArgs {
    /// How long, in minutes.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seconds between rule set swaps.
    #[arg(long, default_value_t = 30.0)]
    swap_every: f64,
    /// Concurrent connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// The engine binary (default: `rampart` beside this binary).
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The rule directory to start from.
    #[arg(long, default_value = "rules")]
    rules: PathBuf,
}

fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        if from.is_dir() {
            if e.file_name() != "samples" {
                copy_dir(&from, &to)?;
            }
        } else {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// `SELECT … FORMAT TabSeparated` over ClickHouse's HTTP interface.
fn ch_query(addr: std::net::SocketAddr, sql: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        // HTTP/1.0: the answer comes unchunked, closed at its end.
        "POST / HTTP/1.0\r\nhost: x\r\ncontent-length: {}\r\n\r\n{sql}",
        sql.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.trim().to_string())
}

pub fn run(a: SoakArgs) -> std::process::ExitCode {
    let bin = a.engine.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("rampart")
    });
    if !a.rules.join("edge").is_dir() {
        eprintln!(
            "soak: {} is not a rule directory (run from the repository's root, or pass --rules)",
            a.rules.display()
        );
        return std::process::ExitCode::from(2);
    }
    let tmp = std::env::temp_dir().join(format!("rampart-soak-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("a temporary directory");
    let Some(mut redis) = servers::redis(&tmp) else {
        eprintln!("soak: redis-server is needed (scripts/test.sh installs it)");
        return std::process::ExitCode::from(2);
    };
    let Some(mut ch) = servers::clickhouse(&tmp) else {
        eprintln!("soak: clickhouse-server is needed (scripts/test.sh installs it)");
        return std::process::ExitCode::from(2);
    };
    let rules = tmp.join("rules");
    copy_dir(&a.rules, &rules).expect("copy the rule set");
    let swap_file = rules.join("edge/soak-swap.rhai");
    let cfg = format!(
        "[server]\n\n[[apps]]\nid = \"{}\"\nsecret = \"{}\"\nwindow_ms = 5000\n\n\
         [state]\nbackend = \"redis\"\nredis_url = \"redis://{}\"\n\n\
         [rules]\ndir = \"{}\"\nreload = true\nreload_interval_ms = 500\n\n\
         [decision_log]\ndir = \"{}\"\nclickhouse_url = \"http://{}\"\nclickhouse_database = \"default\"\nspool_dir = \"{}\"\n",
        gen::APP,
        std::str::from_utf8(gen::SECRET).expect("ascii"),
        redis.addr,
        rules.display(),
        tmp.join("log").display(),
        ch.addr,
        tmp.join("spool").display(),
    );
    let engine = servers::engine(&bin, &tmp, "soak", &cfg);
    // The rate: half of what this engine serves here.
    let probe = gen::run(
        engine.addr,
        a.connections,
        Duration::from_secs(3),
        Pace::Closed,
    );
    let rate = (probe.rps() / 2.0).max(50.0);
    let total = Duration::from_secs_f64(a.minutes * 60.0);
    eprintln!(
        "soak: {:.1} min at {rate:.0} req/s (half of {:.0}); rule set swapped every {} s; Redis restarted at 1/3, ClickHouse at 2/3",
        a.minutes,
        probe.rps(),
        a.swap_every
    );
    let served_before = probe.requests;
    let addr = engine.addr;
    let conns = a.connections;
    let load = std::thread::spawn(move || gen::run(addr, conns, total, Pace::Open { rate }));

    let start = Instant::now();
    let mut rss: Vec<(f64, u64)> = Vec::new();
    let mut next_swap = Duration::from_secs_f64(a.swap_every);
    let (mut redis_done, mut ch_done) = (false, false);
    let mut swaps = 0u32;
    while start.elapsed() < total {
        std::thread::sleep(Duration::from_secs(1));
        let t = start.elapsed();
        if t.as_secs().is_multiple_of(5) {
            if let Some(m) = engine.rss_bytes() {
                rss.push((t.as_secs_f64(), m));
            }
        }
        if t >= next_swap {
            swaps += 1;
            next_swap += Duration::from_secs_f64(a.swap_every);
            // Alternate between the set with and without one more edge rule.
            let r = if swaps % 2 == 1 {
                std::fs::write(
                    &swap_file,
                    format!("//! name: soak-swap\n//! priority: 90\n//! owner: soak\n//! description: swapped in by the soak ({swaps}).\nif req.path == \"/api/soak/{swaps}\" {{ deny(\"soak\") }}\n"),
                )
            } else {
                std::fs::remove_file(&swap_file)
            };
            if let Err(e) = r {
                eprintln!("soak: swap {swaps}: {e}");
            }
        }
        if !redis_done && t >= total / 3 {
            redis_done = true;
            eprintln!("soak: restarting Redis at {:.0} s", t.as_secs_f64());
            redis.restart();
        }
        if !ch_done && t >= total * 2 / 3 {
            ch_done = true;
            eprintln!("soak: restarting ClickHouse at {:.0} s", t.as_secs_f64());
            ch.restart();
        }
    }
    let m = load.join().expect("the load thread");
    let served = served_before + m.requests;

    // Every decision must reach ClickHouse (spooled while it was down), once.
    let count_sql = "SELECT uniqExact(decision_id) FROM default.rampart_decisions";
    let mut rows = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        rows = ch_query(ch.addr, count_sql)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if rows >= served {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let versions = ch_query(
        ch.addr,
        "SELECT uniqExact(ruleset_version) FROM default.rampart_decisions",
    )
    .unwrap_or_default();
    let policy: u64 = m
        .codes
        .iter()
        .filter(|(c, _)| c.as_str() == "STORE_UNAVAILABLE")
        .map(|(_, n)| n)
        .sum();
    let other_failures = m.errors;
    let first = rss
        .iter()
        .take(rss.len().max(3) / 3)
        .map(|x| x.1)
        .max()
        .unwrap_or(0);
    let last = rss
        .iter()
        .rev()
        .take(rss.len().max(3) / 3)
        .map(|x| x.1)
        .max()
        .unwrap_or(0);
    let bounded = last as f64 <= first as f64 * 1.5 + 32.0 * 1048576.0;

    println!("soak report");
    println!("  duration            {:.1} min at {rate:.0} req/s, {swaps} rule set swaps, Redis and ClickHouse restarted once each", a.minutes);
    println!(
        "  memory (RSS, MiB)   {}",
        rss.iter()
            .map(|(t, b)| format!("{t:.0}s:{:.1}", *b as f64 / 1048576.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  memory bounded      {} (first third max {:.1} MiB, last third max {:.1} MiB)",
        if bounded { "yes" } else { "NO" },
        first as f64 / 1048576.0,
        last as f64 / 1048576.0
    );
    println!("  rule set versions   {versions} seen in the decision log");
    println!("  decisions served    {served}");
    println!(
        "  rows logged         {rows} {}",
        if rows == served {
            "(equal)"
        } else {
            "(DIFFERENT)"
        }
    );
    println!(
        "  answers by code     {}",
        m.codes
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("  by declared policy  {policy} (STORE_UNAVAILABLE while Redis restarted; on_store_error = deny)");
    println!("  other failures      {other_failures} (connection errors or non-200 answers)");
    drop(engine);
    drop(ch);
    drop(redis);
    let _ = std::fs::remove_dir_all(&tmp);
    if rows == served && other_failures == 0 && bounded {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
