//! Connection and request limits against a real `rampart serve`: stalled clients are cut off
//! after `client_request_timeout_ms` without holding up anyone else, and oversized headers are
//! refused with `431 HEADERS_TOO_LARGE`.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use support::{agent, temp_dir, Engine};

#[test]
fn stalled_clients_are_cut_off_and_oversized_headers_get_431() {
    let d = temp_dir("limits");
    let e = Engine::start_with_env(
        &d,
        "limits",
        "[[apps]]\nid = \"shop\"\nsecret = \"limits-secret\"\n",
        &[
            ("RAMPART_SERVER_WORKERS", "1"),
            ("RAMPART_SERVER_CLIENT_REQUEST_TIMEOUT_MS", "1000"),
            ("RAMPART_SERVER_MAX_HEADER_BYTES", "2048"),
        ],
    );
    let addr = e.base.trim_start_matches("http://").to_string();

    // Thirty clients send half a request head and stall (slowloris), all on the one worker.
    let mut stalled: Vec<TcpStream> = (0..30)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"POST /v1/decide HTTP/1.1\r\nHost: x\r\nX-Slow: a")
                .unwrap();
            s
        })
        .collect();
    // Everyone else is still served.
    for _ in 0..20 {
        let r = agent().get(&format!("{}/healthz", e.base)).call().unwrap();
        assert_eq!(r.status(), 200);
    }
    // Each stalled connection is answered 408 or closed by the server (EOF), not left open.
    for s in &mut stalled {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        let r = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        assert!(
            r.is_ok(),
            "a stalled connection was kept open: {r:?} {text}"
        );
        assert!(buf.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    }

    // Headers over the limit: 431 with the stable code, on every route, before any handler.
    let big = "x".repeat(3000);
    for path in ["/healthz", "/v1/decide", "/admin/v1/rulesets"] {
        let mut r = agent()
            .get(&format!("{}{path}", e.base))
            .header("x-big", &big)
            .call()
            .unwrap();
        assert_eq!(r.status(), 431, "{path}");
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(v["error"]["code"], "HEADERS_TOO_LARGE", "{path}");
        assert!(r.headers().get("x-request-id").is_some());
    }
    let r = agent()
        .get(&format!("{}/healthz", e.base))
        .header("x-small", &big[..1000])
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(e.metrics().contains("code=\"HEADERS_TOO_LARGE\""));
}
