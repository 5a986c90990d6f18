//! The whole decide path on arbitrary request bodies: parsing and judging never panic, and a
//! request that parses is answered with a verdict or a typed request error.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rampart_core::bloom::SlicedBloomConfig;
use rampart_core::engine::{AppPolicy, DedupPolicy, EngineSettings, FailPolicy};
use rampart_core::rules::LiveRules;
use rampart_core::fingerprint::LocalFingerprintStore;
use rampart_core::nonce::BloomNonceStore;
use rampart_core::{DecideRequest, Engine};

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::new(
            EngineSettings {
                apps: vec![AppPolicy::new("demo", b"demo-secret", 5_000)],
                routes: vec![],
                default_dedup: DedupPolicy::default(),
                on_store_error: FailPolicy::Deny,
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
            Arc::new(LiveRules::empty()),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<DecideRequest>(data) {
        let _ = engine().decide(&req, 1_700_000_000_000);
    }
});
