//! Do the secret comparisons leak timing? A dudect-style measurement (Reparaz, Balasch and
//! Verbauwhede, "Dude, is my code constant time?", 2017): each comparison runs on two classes of
//! input chosen at random per sample, class A equal to the secret and class B different from it in
//! the first byte (where an early-exit comparison stops at once), and Welch's t-test compares the
//! two timing distributions after the slowest 5% of each are cropped. |t| above 4.5 means the
//! time depends on the input; below it, none was seen in this many samples.
//!
//! The plain `==` of two slices (`memcmp`, which stops at the first difference) is measured too,
//! as the positive control: the method must see its leak.
//!
//! `cargo bench -p rampart --bench constant_time` (`CT_SAMPLES`, default 400,000 per target). It
//! prints the table and never fails: timing is measured here, never asserted in tests.

use std::hint::black_box;
use std::time::Instant;

use rampart::auth::ct_eq;
use rampart_core::replay::canonical::{SignedFields, Signer};

/// A measured comparison: `true` = class A (equal input), `false` = class B.
type Target<'a> = (&'static str, Box<dyn FnMut(bool) -> bool + 'a>);

/// Calls per timed sample, so one sample is well above the timer's resolution.
const BATCH: usize = 16;

struct Stats {
    n: f64,
    mean: f64,
    m2: f64,
}

impl Stats {
    fn of(samples: &mut [u64]) -> Stats {
        samples.sort_unstable();
        let kept = &samples[..samples.len() * 95 / 100];
        let mut s = Stats {
            n: 0.0,
            mean: 0.0,
            m2: 0.0,
        };
        for &x in kept {
            s.n += 1.0;
            let d = x as f64 - s.mean;
            s.mean += d / s.n;
            s.m2 += d * (x as f64 - s.mean);
        }
        s
    }

    fn var(&self) -> f64 {
        self.m2 / (self.n - 1.0)
    }
}

/// Times `f(class)` on randomly interleaved classes; Welch's t and each class's ns per call.
fn measure(samples: usize, mut f: impl FnMut(bool) -> bool) -> (f64, f64, f64) {
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let (mut a, mut b) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    // Warm up caches and the branch predictor on both classes.
    for i in 0..10_000 {
        black_box(f(i % 2 == 0));
    }
    for _ in 0..samples {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let class_a = rng & 1 == 0;
        let t0 = Instant::now();
        for _ in 0..BATCH {
            black_box(f(black_box(class_a)));
        }
        let ns = t0.elapsed().as_nanos() as u64;
        if class_a {
            a.push(ns);
        } else {
            b.push(ns);
        }
    }
    let (sa, sb) = (Stats::of(&mut a), Stats::of(&mut b));
    let t = (sa.mean - sb.mean) / (sa.var() / sa.n + sb.var() / sb.n).sqrt();
    (t, sa.mean / BATCH as f64, sb.mean / BATCH as f64)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let samples: usize = std::env::var("CT_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400_000);

    let secret32 = [0x5au8; 32];
    let (equal32, first32) = (secret32, {
        let mut x = secret32;
        x[0] ^= 1;
        x
    });
    let secret4k = vec![0x5au8; 4096];
    let equal4k = secret4k.clone();
    let mut first4k = secret4k.clone();
    first4k[0] ^= 1;

    let signer = Signer::new(b"constant-time-bench-secret");
    let fields = SignedFields {
        app: "shop",
        method: "POST",
        path: "/api/order/pay",
        query: "a=1&b=2",
        timestamp: "1796100000000",
        nonce: "0123456789abcdef",
        body_sha256: "0000000000000000000000000000000000000000000000000000000000000000",
    };
    let good = signer.sign(&fields);
    // The same length, wrong in its first hex digit.
    let mut bad = good.clone().into_bytes();
    let i = "v1=".len();
    bad[i] = if bad[i] == b'0' { b'1' } else { b'0' };
    let bad = String::from_utf8(bad).unwrap();

    println!("dudect-style timing test, {samples} samples per target, batches of {BATCH} calls");
    println!(
        "{:<44} {:>10} {:>10} {:>8}  verdict",
        "target (A: equal, B: first byte differs)", "A ns/call", "B ns/call", "|t|"
    );
    let targets: Vec<Target> = vec![
        (
            "ct_eq, 32 bytes (tokens, session MACs)",
            Box::new(|a| ct_eq(&secret32, if a { &equal32 } else { &first32 })),
        ),
        (
            "ct_eq, 4096 bytes",
            Box::new(|a| ct_eq(&secret4k, if a { &equal4k } else { &first4k })),
        ),
        (
            "Signer::verify (HMAC-SHA256, verify_slice)",
            Box::new(|a| signer.verify(&fields, if a { &good } else { &bad }).is_ok()),
        ),
        (
            "control: == on 4096 bytes (memcmp)",
            Box::new(|a| secret4k == *if a { &equal4k } else { &first4k }),
        ),
    ];
    for (name, f) in targets {
        let (t, a, b) = measure(samples, f);
        let verdict = if t.abs() > 4.5 {
            "timing depends on the input"
        } else {
            "no dependence seen"
        };
        println!("{name:<44} {a:>10.1} {b:>10.1} {:>8.1}  {verdict}", t.abs());
    }
}
