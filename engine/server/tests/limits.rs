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

/// Sends `chunks` as one chunked `POST /v1/decide` (pausing between chunks so each arrives on
/// its own) and returns the answer's status line and JSON body.
fn post_chunked(addr: &str, chunks: &[&[u8]]) -> (String, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"POST /v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    for c in chunks {
        s.write_all(format!("{:x}\r\n", c.len()).as_bytes())
            .unwrap();
        s.write_all(c).unwrap();
        s.write_all(b"\r\n").unwrap();
        s.flush().unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    // The server may answer (413) before the last chunk; a write after that may fail.
    let _ = s.write_all(b"0\r\n\r\n");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.lines().next().unwrap_or_default().to_string();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A body that arrives in several chunks, without a length, is read whole; one over
/// `max_body_bytes` gets `413 BODY_TOO_LARGE` however it arrives.
#[test]
fn bodies_in_chunks_are_joined_and_held_to_the_limit() {
    let d = temp_dir("chunks");
    let e = Engine::start_with_env(
        &d,
        "chunks",
        "[[apps]]\nid = \"shop\"\nsecret = \"chunks-secret\"\n",
        &[("RAMPART_SERVER_MAX_BODY_BYTES", "4096")],
    );
    let addr = e.base.trim_start_matches("http://").to_string();

    // Split inside a string and inside a key: only the joined body parses, and names this app.
    let (status, v) = post_chunked(&addr, &[b"{\"ap", b"p\":\"no", b"pe\"}"]);
    assert!(status.contains(" 404 "), "{status} {v}");
    assert_eq!(v["error"]["code"], "UNKNOWN_APP", "{v}");
    let (status, v) = post_chunked(&addr, &[b"{\"app\":\"nope\"}"]);
    assert!(status.contains(" 404 "), "{status} {v}");

    // Five chunks of 1000 bytes after the key: over 4096 at the fifth.
    let filler = [b' '; 1000];
    let (status, v) = post_chunked(
        &addr,
        &[
            b"{\"app\":\"shop\"",
            &filler,
            &filler,
            &filler,
            &filler,
            &filler,
            b"}",
        ],
    );
    assert!(status.contains(" 413 "), "{status} {v}");
    assert_eq!(v["error"]["code"], "BODY_TOO_LARGE", "{v}");
    // Just under the limit, in chunks: read whole (the app is then judged: not a 413).
    let (status, v) = post_chunked(
        &addr,
        &[b"{\"app\":\"nope\"", &filler, &filler, &filler, b"}"],
    );
    assert!(status.contains(" 404 "), "{status} {v}");
}

/// A client that sends its head and then drips (or withholds) its body is answered `408
/// BODY_TIMEOUT` and cut off after `client_body_timeout_ms` (default 5 s), not held forever.
#[test]
fn a_body_that_never_arrives_is_cut_off_with_408() {
    let d = temp_dir("drip");
    let e = Engine::start(
        &d,
        "drip",
        "[[apps]]\nid = \"shop\"\nsecret = \"drip-secret\"\n",
    );
    let addr = e.base.trim_start_matches("http://").to_string();
    let started = std::time::Instant::now();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(
        b"POST /v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"app\":",
    )
    .unwrap();
    // A byte now and then, never the whole body.
    let mut dripper = s.try_clone().unwrap();
    std::thread::spawn(move || {
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(250));
            if dripper.write_all(b" ").is_err() {
                return;
            }
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(9))).unwrap();
    let mut buf = Vec::new();
    let r = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    assert!(
        r.is_ok(),
        "the dripping connection was kept open: {r:?} {text}"
    );
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("BODY_TIMEOUT"), "{text}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(4500), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
}

/// A batch item is held to `max_body_bytes` (a single decide body's limit), not to the whole
/// batch's: the big item is answered `BODY_TOO_LARGE` in its place, the others are judged.
#[test]
fn a_batch_item_larger_than_a_decide_body_is_refused_in_its_place() {
    let d = temp_dir("batch-item");
    let e = Engine::start_with_env(
        &d,
        "batch-item",
        "[[apps]]\nid = \"shop\"\nsecret = \"batch-secret\"\n",
        &[("RAMPART_SERVER_MAX_BODY_BYTES", "4096")],
    );
    let big = serde_json::json!({"app": "shop", "params": {"pad": "x".repeat(10_000)}});
    let small = serde_json::json!({"app": "shop"});
    let (status, v) = support::post(
        &format!("{}/v1/decide/batch", e.base),
        &serde_json::json!([small, big, small]),
    );
    assert_eq!(status, 200, "{v}");
    assert!(v[0]["code"].is_string(), "judged: {v}");
    assert_eq!(v[1]["error"]["code"], "BODY_TOO_LARGE", "{}", v[1]);
    assert!(v[2]["code"].is_string(), "judged: {v}");
}
