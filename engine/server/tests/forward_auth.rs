//! Forward-auth end to end: a real nginx (`auth_request`) in front of a toy upstream asks a real
//! `rampart serve` about every request. A signed fresh request reaches the upstream; its replay is
//! stopped by nginx with 409 and never reaches it. The nginx configuration is the documented
//! example (`docs/integration/nginx.conf`) with the ports filled in. A client that spoofs the
//! proxy's headers (the other family's URI and method, X-Forwarded-For, X-Real-IP) or identity
//! headers (user, device, JA3) changes nothing of what is judged.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use support::{free_port, now_ms, temp_dir, Engine, Nginx};

const SECRET: &str = "forward-auth-secret";

/// A minimal HTTP upstream that counts the requests it serves.
fn upstream(hits: Arc<AtomicU64>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let hits = hits.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                hits.fetch_add(1, Ordering::Relaxed);
                let body = "hello from the upstream";
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn nginx(dir: &std::path::Path, listen: u16, rampart: &str, upstream: u16) -> Nginx {
    let example = std::fs::read_to_string(format!(
        "{}/../../docs/integration/nginx.conf",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap()
    .replace("127.0.0.1:8080", rampart)
    .replace("127.0.0.1:9000", &format!("127.0.0.1:{upstream}"))
    .replace("listen 80;", &format!("listen 127.0.0.1:{listen};"));
    Nginx::start(dir, &example, listen)
}

#[test]
fn nginx_lets_a_signed_fresh_request_through_and_stops_its_replay_with_409() {
    let dir = temp_dir("nginx");
    let engine = Engine::start(
        &dir,
        "authz",
        &format!(
            "[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 30000\n[rules]\ndefaults = false\n"
        ),
    );
    let hits = Arc::new(AtomicU64::new(0));
    let up = upstream(hits.clone());
    let listen = free_port();
    let _nginx = nginx(&dir, listen, engine.base.trim_start_matches("http://"), up);

    let h = rampart_core::replay::sign::sign(
        SECRET.as_bytes(),
        &rampart_core::replay::sign::ToSign {
            app: "shop",
            method: "GET",
            path: "/api/items",
            query: "page=2&sort=new",
            body: b"",
            timestamp_ms: now_ms(),
            nonce: &format!("nginx-nonce-{}-0001", std::process::id()),
        },
    );
    let send = || {
        let mut r = support::agent()
            .get(&format!(
                "http://127.0.0.1:{listen}/api/items?sort=new&page=2"
            ))
            .header("x-timestamp", &h.timestamp)
            .header("x-nonce", &h.nonce)
            .header("x-signature", &h.signature)
            .call()
            .unwrap();
        let status = r.status().as_u16();
        let code = r
            .headers()
            .get("x-rampart-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        (
            status,
            code,
            r.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    let (status, _, body) = send();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "hello from the upstream");
    assert_eq!(hits.load(Ordering::Relaxed), 1);

    let (status, code, _) = send();
    assert_eq!(
        status, 409,
        "the replay is stopped with the decision's status"
    );
    assert_eq!(code, "REPLAY_DUPLICATE");
    assert_eq!(
        hits.load(Ordering::Relaxed),
        1,
        "the replay never reached the upstream"
    );

    // Unsigned: 401 straight from auth_request.
    let r = support::agent()
        .get(&format!("http://127.0.0.1:{listen}/api/items"))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(hits.load(Ordering::Relaxed), 1);
}

#[test]
fn nginx_clients_spoofing_proxy_and_identity_headers_change_nothing_judged() {
    let dir = temp_dir("nginx-spoof");
    let engine = Engine::start(
        &dir,
        "spoof",
        &format!(
            "[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 30000\n[rules]\ndefaults = false\n"
        ),
    );
    let hits = Arc::new(AtomicU64::new(0));
    let up = upstream(hits.clone());
    let listen = free_port();
    let _nginx = nginx(&dir, listen, engine.base.trim_start_matches("http://"), up);

    let spoofs: [(&str, &str); 12] = [
        ("X-Original-URI", "/admin/wipe"),
        ("X-Original-Method", "DELETE"),
        ("X-Forwarded-Uri", "/admin/wipe"),
        ("X-Forwarded-Method", "DELETE"),
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Real-IP", "6.6.6.6"),
        ("X-User-Id", "victim"),
        ("x-user-id", "victim"),
        ("X-Device-Id", "victim-device"),
        ("X-Ja3", "771,4865-4866,0-23,29-23,0"),
        ("X-Country", "ZZ"),
        ("X-Device-Type", "bot"),
    ];
    for (i, (name, value)) in spoofs.iter().enumerate() {
        let h = rampart_core::replay::sign::sign(
            SECRET.as_bytes(),
            &rampart_core::replay::sign::ToSign {
                app: "shop",
                method: "GET",
                path: "/api/items",
                query: "",
                body: b"",
                timestamp_ms: now_ms(),
                nonce: &format!("spoof-nonce-{}-{i:04}", std::process::id()),
            },
        );
        let mut r = support::agent()
            .get(&format!("http://127.0.0.1:{listen}/api/items"))
            .header("x-timestamp", &h.timestamp)
            .header("x-nonce", &h.nonce)
            .header("x-signature", &h.signature)
            .header(*name, *value)
            .call()
            .unwrap();
        let status = r.status().as_u16();
        let body = r.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(status, 200, "{name}: {body}");
        let (s, recent) = engine.admin_get("/admin/v1/decisions/recent?limit=1");
        assert_eq!(s, 200, "{recent}");
        let row = &recent["decisions"][0];
        assert_eq!(row["code"], "OK", "{name}: {row}");
        assert_eq!(row["method"], "GET", "{name}: {row}");
        assert_eq!(row["route"], "/api/items", "{name}: {row}");
        assert_eq!(row["ip"], "127.0.0.1", "{name}: {row}");
        for field in ["user", "device_id", "ja3", "country", "device_type"] {
            assert!(
                row[field].is_null(),
                "{name}: {field} was taken from the client: {row}"
            );
        }
    }
    assert_eq!(hits.load(Ordering::Relaxed), spoofs.len() as u64);
}
