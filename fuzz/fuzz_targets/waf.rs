//! The WAF detectors over attacker-chosen bytes: every decoder and detector must terminate without
//! panicking, on any value and any request shape, and a value's verdict must not depend on the
//! per-thread cache.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::waf::{scan_request, scan_value};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let direct = scan_value(&text);
    assert_eq!(scan_value(&text), direct, "scanning is deterministic");
    // Split the input into request parts at the first few NUL bytes.
    let mut parts = text.splitn(4, '\0');
    let path = parts.next().unwrap_or("/");
    let query = parts.next().unwrap_or("");
    let body = parts.next().unwrap_or("");
    let header = parts.next().unwrap_or("");
    let headers = [("user-agent", header), ("cookie", header), ("x-custom", header)];
    let first = scan_request(path, query, body, None, headers.iter().copied());
    let again = scan_request(path, query, body, None, headers.iter().copied());
    assert_eq!(first, again, "the header cache does not change a verdict");
});
