//! Forward-auth header parsing (`/v1/authz`): arbitrary check requests never panic, and whatever
//! parses is a decide request the rest of the path can take (an absolute path, an app id, a query
//! that canonicalises). Input: the first line is the check request's own path and query, the next
//! lines are `name: value` headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::replay::canonical::canonical_query;
use rampart_core::forward::CheckRequest;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let pq = lines.next().unwrap_or("/v1/authz");
    let headers: Vec<(&str, &str)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim(), v))
        .take(64)
        .collect();
    let check = CheckRequest {
        headers: &headers,
        method: "GET",
        path_and_query: pq,
        peer_ip: Some("127.0.0.1"),
    };
    if let Ok(d) = check.to_decide() {
        assert!(d.request.path.starts_with('/'));
        assert!(!d.app.is_empty() && d.app.trim() == d.app);
        assert!(!d.request.path.contains('?'));
        let q = canonical_query(&d.request.query);
        assert_eq!(canonical_query(&q), q);
    }
});
