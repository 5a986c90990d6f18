//! Cost of a proof-of-work challenge on the decision path: issuing one (a `challenge` answer) and
//! verifying a solution and a clearance (a request that carries one). Target (issue 28): ≤ 2 µs
//! each.
//!
//! Run: `cargo bench -p rampart-core --bench challenge`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rampart_core::challenge::{solve, ChallengeConfig};

fn bench(c: &mut Criterion) {
    let cfg = ChallengeConfig {
        keys: vec![[9; 32], [8; 32]],
        difficulty: 8,
        seed: 1,
        ..ChallengeConfig::default()
    };
    let now = 1_800_000_000_000;
    let ch = cfg.issue("shop", "203.0.113.9", 8, now);
    let sol = format!("{}:{}", ch.token, solve(&ch.token, 8));
    let cl = cfg.clearance("shop", "203.0.113.9", now);
    let mut g = c.benchmark_group("challenge");
    g.bench_function("issue", |b| {
        b.iter(|| black_box(cfg.issue("shop", black_box("203.0.113.9"), 16, now)))
    });
    g.bench_function("verify solution", |b| {
        b.iter(|| black_box(cfg.verify_solution(black_box(&sol), "shop", "203.0.113.9", now + 1)))
    });
    g.bench_function("verify clearance", |b| {
        b.iter(|| {
            black_box(cfg.verify_clearance(black_box(&cl.token), "shop", "203.0.113.9", now + 1))
        })
    });
    // A rotated key list: the current key second (the worst case, two MACs).
    let rotated = ChallengeConfig {
        keys: vec![[1; 32], [9; 32]],
        ..cfg.clone()
    };
    g.bench_function("verify clearance (second key)", |b| {
        b.iter(|| {
            black_box(rotated.verify_clearance(
                black_box(&cl.token),
                "shop",
                "203.0.113.9",
                now + 1,
            ))
        })
    });
    // What a request without either header pays: one pass over its headers for the two names
    // (then `challenge_pass` returns). A browser-like request with ten headers.
    let mut plain = rampart_core::model::JudgedRequest::default();
    for (k, v) in [
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/148.0 Safari/537.36",
        ),
        ("accept", "application/json"),
        ("accept-language", "de-DE,de;q=0.9,en;q=0.8"),
        ("accept-encoding", "gzip, deflate, br"),
        ("content-type", "application/json"),
        ("cookie", "session=abc123; theme=dark"),
        ("referer", "https://shop.example/products?page=2"),
        ("x-timestamp", "1800000000000"),
        ("x-nonce", "n0nce-0123456789AB"),
        (
            "x-signature",
            "v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33",
        ),
    ] {
        plain.headers.insert(k.into(), v.into());
    }
    g.bench_function("no challenge headers (every other request)", |b| {
        b.iter(|| {
            black_box(black_box(&plain).headers_of([
                rampart_core::challenge::SOLUTION_HEADER,
                rampart_core::challenge::CLEARANCE_HEADER,
            ]))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
