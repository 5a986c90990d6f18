//! Cost of the OWASP Core Rule Set per request, as the edge tier runs it (`crs(req)`): Debian's
//! CRS (`/usr/share/modsecurity-crs/rules`, or `CRS_DIR`) at paranoia 1 and 2, with Rampart's
//! default file selection and exclusions, on benign shop requests of the benign traffic corpus
//! (bench/waf/shop-traffic.jsonl: searches, product pages, JSON carts and orders, form logins,
//! reviews, uploads). One iteration judges one request; `warm` and `cold` cycle over the first
//! 400.
//!
//! The rule set remembers what it learnt about values of up to 512 bytes (their literals, the
//! rules that do not match them), and a per-thread memo keeps libinjection's verdicts: user
//! agents, header values, argument names and search terms recur across requests. `cold` clears
//! both before every request (each request judged as if its values were new), `warm` lets them
//! work as under live traffic — on 400 cycled requests every value recurs, so `warm` is an upper
//! bound. `stream` judges the corpus's 1,600 requests in order with the memos emptied at its
//! start, so each request meets only what the requests before it left (session cookies, form
//! values and bodies are new each time): the figure for live traffic of this kind.
//!
//! It allocates with the server binary's allocator (mimalloc, as `rampart` does): a judged request
//! makes about 140 short-lived allocations, and the figure should be what the server pays.
//! `--features bench-system-alloc` measures with the system allocator instead.
//!
//! Run: `cargo bench -p rampart-core --bench crs` (target: ≤ 20 µs per benign request at PL1).

#[cfg(not(feature = "bench-system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, Criterion};
use rampart_core::model::DecideRequest;
use rampart_core::waf::crs::{Crs, CrsOptions};

fn crs_dir() -> Option<PathBuf> {
    let d = std::env::var("CRS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| "/usr/share/modsecurity-crs/rules".into());
    d.is_dir().then_some(d)
}

fn load(dir: &Path, paranoia: u8) -> Crs {
    let files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".conf")
                .then(|| (n, std::fs::read_to_string(e.path()).unwrap()))
        })
        .collect();
    let options = CrsOptions {
        paranoia,
        ..CrsOptions::default()
    };
    Crs::build(
        &files,
        &[],
        &|f| std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string()),
        options,
    )
    .unwrap()
}

/// The benign corpus's requests, as /v1/decide bodies.
fn requests() -> Vec<DecideRequest> {
    let path = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../bench/waf/shop-traffic.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let uri = v["uri"].as_str().unwrap_or("/");
            let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
            let mut r = DecideRequest {
                app: "shop".into(),
                ..Default::default()
            };
            r.request.method = v["method"].as_str().unwrap_or("GET").into();
            r.request.path = path.into();
            r.request.query = query.into();
            r.request.body = v["body"]
                .as_str()
                .filter(|b| !b.is_empty())
                .map(String::from);
            if let Some(h) = v["headers"].as_object() {
                for (k, val) in h {
                    r.request
                        .headers
                        .insert(k.clone(), val.as_str().unwrap_or("").into());
                }
            }
            r.client.ip = Some("198.51.100.7".into());
            r
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let Some(dir) = crs_dir() else {
        eprintln!(
            "crs bench: no CRS rules directory (install Debian's modsecurity-crs or set CRS_DIR)"
        );
        return;
    };
    let all = requests();
    let reqs = &all[..400.min(all.len())];
    let mut g = c.benchmark_group("crs");
    for paranoia in [1u8, 2] {
        let crs = load(&dir, paranoia);
        let mut i = 0;
        g.bench_function(format!("benign/pl{paranoia}/warm"), |b| {
            b.iter(|| {
                i = (i + 1) % reqs.len();
                black_box(crs.judge(&reqs[i]))
            })
        });
        let mut i = 0;
        g.bench_function(format!("benign/pl{paranoia}/cold"), |b| {
            // The emptying is set-up, outside the time measured.
            b.iter_batched(
                || {
                    i = (i + 1) % reqs.len();
                    crs.clear_memo();
                    &reqs[i]
                },
                |r| crs.judge(r),
                criterion::BatchSize::PerIteration,
            )
        });
        // The whole corpus in order, the memos emptied whenever it starts again: each request
        // finds only the values the requests before it in the stream left.
        let mut i = 0;
        g.bench_function(format!("benign/pl{paranoia}/stream"), |b| {
            b.iter(|| {
                if i == 0 {
                    crs.clear_memo();
                }
                let v = crs.judge(&all[i]);
                i = (i + 1) % all.len();
                black_box(v)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
