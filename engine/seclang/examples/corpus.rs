//! Runs a CRS-format corpus (JSON lines: method, uri, headers, body, label, paranoia, family)
//! through a CRS rule directory and prints what the rules refuse, by label, paranoia level and
//! family, with the time per request.
//!
//!     cargo run --release -p rampart-seclang --example corpus -- RULES_DIR CORPUS.jsonl [PL] [THRESHOLD]
//!
//! Environment: `SKIP=920-,…` leaves out files whose names contain these; `EXTRA=a.conf,…` loads
//! files after the CRS's; `PASSES=N` only times N passes over the corpus (with `COLD=1`, the
//! set's value memo and the libinjection memo emptied before each request); `STEADY=1` judges
//! the corpus once untimed, then times each request with those memos emptied (a running server
//! meeting requests it has not seen); `FEATURES`, `VERBOSE`, `FTW`, `REPEAT` print more (see
//! below).
//!
//! It allocates with the server binary's allocator (mimalloc); `--features example-system-alloc`
//! builds it with the system's (the instruction counts in docs/waf.md before this revision were
//! taken with the system allocator).

#[cfg(not(feature = "example-system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::time::Instant;

use rampart_seclang::{Request, Ruleset};

/// Method, URI, body and headers of a corpus request.
type Req = (String, String, String, Vec<(String, String)>);

/// A corpus line: its JSON, and the request it describes.
fn parse(line: &str) -> (serde_json::Value, Req) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let headers = v["headers"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    let r = (s("method"), s("uri"), s("body"), headers);
    (v, r)
}

fn request((method, uri, body, headers): &Req) -> Request<'_> {
    Request {
        method,
        uri,
        protocol: "HTTP/1.1",
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        body: body.as_bytes(),
        remote_addr: "203.0.113.10",
    }
}

/// Every request of the corpus.
fn requests(corpus: &str) -> Vec<Req> {
    corpus
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| parse(line).1)
        .collect()
}

/// Empties what the engine remembers of values: the set's memo and this thread's libinjection
/// verdicts (the regexes' lazily built automata stay, as in a server that has been running).
fn forget(rs: &Ruleset) {
    rs.clear_memo();
    rampart_seclang::ops::clear_memo();
}

/// One pass over the requests; the number refused. Not inlined, so that a profiler can count
/// this function alone (`valgrind --tool=callgrind --toggle-collect='corpus::run_pass'`).
#[inline(never)]
fn run_pass(rs: &Ruleset, reqs: &[Req]) -> usize {
    // COLD=1: every request judged with the set's memo empty.
    let cold = std::env::var_os("COLD").is_some();
    let mut refused = 0;
    for r in reqs {
        if cold {
            forget(rs);
        }
        refused += rs.evaluate(&request(r)).interrupted.is_some() as usize;
    }
    refused
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let dir = &a[1];
    let corpus = std::fs::read_to_string(&a[2]).unwrap();
    let pl: u8 = a.get(3).map(|s| s.parse().unwrap()).unwrap_or(1);
    let threshold: i64 = a.get(4).map(|s| s.parse().unwrap()).unwrap_or(5);
    let verbose = std::env::var("VERBOSE").is_ok();
    let setup = format!(
        "SecAction \"id:900000,phase:1,pass,nolog,setvar:tx.crs_setup_version=400,setvar:tx.paranoia_level={pl},setvar:tx.blocking_paranoia_level={pl},setvar:tx.detection_paranoia_level={pl},setvar:tx.inbound_anomaly_score_threshold={threshold}\""
    );
    let mut files = vec![("setup.conf".to_string(), setup)];
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        let skip = std::env::var("SKIP").unwrap_or_default();
        if n.starts_with("REQUEST-")
            && n.ends_with(".conf")
            && !skip.split(',').any(|s| !s.is_empty() && n.contains(s))
        {
            files.push((n, std::fs::read_to_string(&p).unwrap()));
        }
    }
    // EXTRA=a.conf,b.conf: files loaded after the CRS's (exclusions, as an operator adds them).
    for f in std::env::var("EXTRA").unwrap_or_default().split(',') {
        if !f.is_empty() {
            files.push((f.to_string(), std::fs::read_to_string(f).unwrap()));
        }
    }
    let d = dir.clone();
    let rs = Ruleset::build(&files, &move |f| {
        std::fs::read_to_string(format!("{d}/{f}")).map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e:?}"));
    // PASSES=N: time N passes over the whole corpus, each request once per pass, and stop. The
    // first pass meets every value for the first time in this process (the per-thread memos
    // empty); later passes find the values they memoised.
    if let Some(passes) = std::env::var("PASSES")
        .ok()
        .and_then(|p| p.parse::<usize>().ok())
    {
        let reqs = requests(&corpus);
        for pass in 1..=passes {
            let t = Instant::now();
            let refused = run_pass(&rs, &reqs);
            println!(
                "pass {pass}: {} requests, {refused} refused, {:.1} µs each",
                reqs.len(),
                t.elapsed().as_secs_f64() * 1e6 / reqs.len() as f64
            );
        }
        return;
    }
    // STEADY=1: as a server that has been running meets these requests: one untimed pass first
    // (the regexes' lazy automata built), then each timed request judged with the value memos
    // empty, so that no request is helped by having been seen before.
    let steady = std::env::var_os("STEADY").is_some();
    if steady {
        run_pass(&rs, &requests(&corpus));
    }
    let mut by: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    // Only the judging is timed: not the reading of the corpus's JSON, nor the printing.
    let mut judging = std::time::Duration::ZERO;
    let mut n = 0;
    for line in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let (v, r) = parse(line);
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        let req = request(&r);
        let repeat: usize = std::env::var("REPEAT")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(1);
        if repeat > 1 {
            let t = Instant::now();
            for _ in 0..repeat {
                std::hint::black_box(rs.evaluate(&req));
            }
            println!(
                "{} {:.1} µs",
                s("id"),
                t.elapsed().as_secs_f64() * 1e6 / repeat as f64
            );
        }
        if steady {
            forget(&rs);
        }
        let t = Instant::now();
        let o = rs.evaluate(&req);
        judging += t.elapsed();
        n += 1;
        // FTW=1: did the test's own rule fire (what the CRS regression suite checks)?
        let refused = if std::env::var("FTW").is_ok() {
            let id: u32 = s("crs_rule").parse().unwrap_or(0);
            o.matched.iter().any(|m| m.id == id)
        } else {
            o.interrupted.is_some()
        };
        let label = s("label");
        let p = v["paranoia"].as_u64().unwrap_or(1);
        for key in [
            format!("{label} PL{p}"),
            format!("{label} PL{p} {}", s("family")),
        ] {
            let e = by.entry(key).or_default();
            e.1 += 1;
            if refused {
                e.0 += 1;
            }
        }
        if std::env::var_os("FEATURES").is_some() {
            let m: Vec<String> = o
                .matched
                .iter()
                .map(|m| {
                    let var = m.var.split(':').next().unwrap_or("");
                    format!(
                        "{}:{}:{}:{}",
                        m.id,
                        m.paranoia.unwrap_or(1),
                        m.severity.unwrap_or(9),
                        var
                    )
                })
                .collect();
            println!("F {} {}", s("id"), m.join(","));
        }
        if verbose {
            let ids: Vec<u32> = o.matched.iter().map(|m| m.id).collect();
            println!(
                "{} {} score={} {:?}",
                s("id"),
                if refused { "REFUSED" } else { "passed" },
                o.score,
                ids
            );
        }
    }
    println!(
        "{} rules at PL{pl}, threshold {threshold}: {n} requests, {:.1} µs each",
        rs.rule_count(),
        judging.as_secs_f64() * 1e6 / n as f64
    );
    for (k, (hit, total)) in &by {
        println!(
            "  {k:40} {hit:5}/{total:<5} {:5.1}%",
            100.0 * *hit as f64 / *total as f64
        );
    }
}
