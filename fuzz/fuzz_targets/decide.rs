//! The whole decide path on arbitrary request bodies, with the default rule set (`rules/`) live:
//! parsing, the WAF, every rule helper and judging never panic, and a request that parses is
//! answered with a verdict or a typed request error. The harness signs each request as its client
//! would (the fuzzed timestamp and nonce when they are usable), so the nonce, fingerprint,
//! gateway and business steps and every state helper are fuzzed, not only the signature check;
//! the engine lives across inputs, so replays and floods are explored too.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::engine::EngineSettings;
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy};
use rampart_core::rules::{LiveRules, RuleSet, RuleSettings, RuleState, Source};
use rampart_core::replay::fingerprint::LocalFingerprintStore;
use rampart_core::replay::nonce::BloomNonceStore;
use rampart_core::{DecideRequest, Engine};

fn default_rules() -> RuleSet {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<Source>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                let path = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                out.push(Source { path, text });
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rules");
    let mut sources = Vec::new();
    for tier in ["edge", "gateway", "business", "lists"] {
        walk(&root, &root.join(tier), &mut sources);
    }
    RuleSet::compile(&sources, RuleSettings::default(), &RuleState::local(100_000))
        .expect("the default rules compile")
}

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::new(
            EngineSettings {
                apps: vec![AppPolicy::new("demo", b"demo-secret", 5_000)],
                routes: vec![],
                default_dedup: DedupPolicy::default(),
                on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
                challenge_status: 401,
            },
            Arc::new(BloomNonceStore::new(
                SlicedBloomConfig {
                    expected_rps: 10_000,
                    slice_ms: 250,
                    retention_ms: 10_000,
                    max_window_ms: 5_000,
                    target_fp: 1e-6,
                },
                1,
            )),
            Arc::new(LocalFingerprintStore::new(100_000)),
            Arc::new(LiveRules::new(default_rules())),
        )
    })
}

const NOW: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut req) = serde_json::from_slice::<DecideRequest>(data) {
        rampart_core::replay::sign::sign_for_fuzzing(&mut req, b"demo-secret", NOW);
        let _ = engine().decide(&req, NOW);
    }
});
