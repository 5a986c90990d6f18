//! Cost of the full default rule set (`rules/`, three tiers) per decision, on one core.
//!
//! Each iteration judges one recorded sample from `rules/samples/` (benign traffic, or attacks)
//! through the edge, gateway and business tiers and the score thresholds — the work the rule
//! runtime adds to a decision. The anti-replay steps are measured by the `replay` bench.
//! Client IPs, devices and users rotate over a thousand values and the clock advances 1 ms per
//! decision, so rate limits and counters see realistic, mostly-passing traffic.
//!
//! Run: `cargo bench -p rampart-core --bench rules` (target: ≤ 5 µs per decision). Also: the cost
//! of counting a helper call among the instance's hottest keys (`hot-keys/…`).

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use rampart_core::lifecycle::regress::{Kind, Sample};
use rampart_core::model::DecideRequest;
use rampart_core::policy::{AppPolicy, Tier};
use rampart_core::rules::DecisionContext;
use rampart_core::rules::{Req, RuleSession, RuleSet, RuleSettings, RuleState, Source};

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let rel = p
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
        }
    }
}

fn rules_dir() -> std::path::PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../rules")
}

fn load_rules() -> Vec<Source> {
    let root = rules_dir();
    let mut files = Vec::new();
    for tier in ["edge", "gateway", "business", "lists"] {
        walk(&root, &root.join(tier), &mut files);
    }
    files
        .into_iter()
        .map(|(path, text)| Source { path, text })
        .collect()
}

fn load_samples(kind: Kind) -> Vec<DecideRequest> {
    let root = rules_dir().join("samples");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files
        .into_iter()
        .filter(|(p, _)| p.ends_with(".json"))
        .filter_map(|(p, t)| Sample::parse(&p, &t).ok())
        .filter(|s| s.kind == kind && s.before.is_empty())
        .map(|s| s.request)
        .collect()
}

struct Bench {
    set: RuleSet,
    app: AppPolicy,
    requests: Vec<DecideRequest>,
}

impl Bench {
    fn new(kind: Kind) -> Bench {
        Self::with_rules(kind, |_| true)
    }

    fn with_rules(kind: Kind, keep: impl Fn(&Source) -> bool) -> Bench {
        let rules: Vec<Source> = load_rules().into_iter().filter(|s| keep(s)).collect();
        let set = RuleSet::compile(&rules, RuleSettings::default(), &RuleState::local(1 << 22))
            .expect("default rules compile");
        let base = load_samples(kind);
        // Rotate clients so per-IP/user limits see ordinary traffic.
        let requests = (0..4000)
            .map(|i| {
                let mut r = base[i % base.len()].clone();
                r.client.ip = Some(format!("198.51.{}.{}", (i / 250) % 4, i % 250 + 1));
                r.client.device_id = Some(format!("dev-{}", i % 1000));
                r.user_id = Some(format!("u-{}", i % 1000));
                r
            })
            .collect();
        Bench {
            set,
            app: AppPolicy::new("shop", b"s", 5000),
            requests,
        }
    }

    /// One decision's worth of rule evaluation.
    fn judge(&self, i: usize, now: i64) -> bool {
        let r = &self.requests[i % self.requests.len()];
        let ctx = DecisionContext {
            request: r,
            app: &self.app,
            now_ms: now,
        };
        let req = Req::from_context(&ctx);
        let mut session = RuleSession::default();
        for tier in [Tier::Edge, Tier::Gateway, Tier::Business] {
            if self.set.evaluate_tier(tier, &req, &mut session).is_some() {
                return false;
            }
        }
        self.set.finish(&mut session).is_none()
    }
}

fn summary() {
    println!(
        "\nfull default rule set ({} rules) per decision, one thread:",
        Bench::new(Kind::Benign).set.rule_count()
    );
    let no_waf = |s: &Source| !s.path.starts_with("edge/waf-");
    for (label, kind, waf) in [
        ("benign traffic", Kind::Benign, true),
        ("attacks", Kind::Attack, true),
        ("benign, no WAF", Kind::Benign, false),
    ] {
        let b = if waf {
            Bench::new(kind)
        } else {
            Bench::with_rules(kind, no_waf)
        };
        let n = 200_000;
        let mut now = 1_767_225_600_000i64;
        let mut allowed = 0;
        for i in 0..20_000 {
            now += 1;
            allowed += b.judge(i, now) as usize;
        }
        let t = Instant::now();
        for i in 0..n {
            now += 1;
            allowed += b.judge(i, now) as usize;
        }
        let per = t.elapsed().as_nanos() as f64 / n as f64 / 1000.0;
        println!(
            "  {label:<15} {per:>6.2} µs/decision  ({:.0}% allowed, {} rules)",
            100.0 * allowed as f64 / (n + 20_000) as f64,
            b.set.rule_count()
        );
    }
    println!();
}

fn bench(c: &mut Criterion) {
    summary();
    let b = Bench::new(Kind::Benign);
    let mut i = 0usize;
    let mut now = 1_767_225_600_000i64;
    c.bench_function("rules/default-set/benign", |bn| {
        bn.iter(|| {
            i += 1;
            now += 1;
            black_box(b.judge(i, now))
        })
    });
    // What counting one helper call among the hottest keys adds to it: a key already kept, and
    // a stream of new keys that keeps the summary full (the dearest case: the least-called key
    // is looked for and replaced).
    use rampart_core::store::hot::{HotKeys, HotKind};
    let hot = HotKeys::new();
    c.bench_function("hot-keys/record/kept-key", |bn| {
        bn.iter(|| hot.record(HotKind::RateLimit, black_box("ip:203.0.113.9"), false, now))
    });
    let keys: Vec<String> = (0..10_000)
        .map(|i| format!("ip:198.51.{}.{}", i / 256, i % 256))
        .collect();
    let mut k = 0usize;
    c.bench_function("hot-keys/record/new-key-full-summary", |bn| {
        bn.iter(|| {
            k = (k + 1) % keys.len();
            hot.record(HotKind::RateLimit, black_box(&keys[k]), false, now)
        })
    });
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
