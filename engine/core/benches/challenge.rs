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
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
