//! JSON fingerprint canonicalisation over arbitrary JSON: never panics, output is valid JSON, and
//! canonicalising the canonical form changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::replay::fingerprint::canonical_json;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let volatile = vec!["requestTime".to_string(), "nonce".to_string()];
    let c = canonical_json(&value, &volatile);
    let again: serde_json::Value = serde_json::from_str(&c).expect("canonical JSON parses");
    assert_eq!(canonical_json(&again, &volatile), c, "canonical form is a fixed point");
});
