//! TLS for the API (`[server] tls_cert_file`, `tls_key_file`): a real `rampart serve` with a
//! throwaway self-signed certificate, spoken to by a rustls client that trusts only that
//! certificate. Decisions, the console and the admin API are served over it; plain HTTP on the
//! port gets no answer; a client that does not trust the certificate fails the handshake; bad
//! files stop start-up before the port is bound.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use support::{free_port, now_ms, temp_dir, Call};

const SECRET: &str = "tls-test-secret";

/// A certificate for `localhost` and 127.0.0.1, written as PEM files; its DER for the client.
fn certificate(dir: &Path, name: &str) -> CertificateDer<'static> {
    let c =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), c.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{name}.key")),
        c.signing_key.serialize_pem(),
    )
    .unwrap();
    c.cert.der().clone()
}

fn client(trusted: CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One HTTP/1.1 exchange over TLS: the status code, the headers and the body, or the TLS error.
fn exchange(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String, String), String> {
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let conn =
        rustls::ClientConnection::new(tls.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let mut stream = rustls::StreamOwned::new(conn, sock);
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(req.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    match stream.read_to_end(&mut out) {
        Ok(_) => {}
        // Servers may close without close_notify after `Connection: close`.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    Ok((status, head.to_string(), body.to_string()))
}

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, port: u16, tls: &str) -> std::path::PathBuf {
    let path = dir.join("tls.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n{tls}\n\
             [decision_log]\ndir = \"{}\"\n\
             [[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\n[rules]\ndefaults = false\n",
            dir.join("log").display()
        ),
    )
    .unwrap();
    path
}

fn start(dir: &Path, trusted: &Arc<rustls::ClientConfig>) -> Server {
    let port = free_port();
    let tls = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        dir.join("server.crt").display(),
        dir.join("server.key").display()
    );
    let cfg = config(dir, port, &tls);
    let child = Command::new(support::bin())
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .env("RAMPART_ADMIN_STATE_DIR", dir.join("control"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.stderr")).unwrap())
        .spawn()
        .unwrap();
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(
        exchange(port, trusted, "GET", "/readyz", ""),
        Ok((200, _, _))
    ) {
        assert!(
            Instant::now() < deadline,
            "not ready over TLS: {}",
            std::fs::read_to_string(dir.join("serve.stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

#[test]
fn the_api_and_the_console_are_served_over_tls() {
    let dir = temp_dir("tls");
    let cert = certificate(&dir, "server");
    let trusted = client(cert);
    let server = start(&dir, &trusted);

    // A signed decision, and its replay, over HTTPS.
    let call = Call {
        app: "shop",
        secret: SECRET.as_bytes(),
        path: "/api/pay",
        body: "{\"amount\":5}".into(),
        user: "u-1",
        ip: "198.51.100.1",
        device: "d-1",
        nonce: format!("tls-{}-{}", std::process::id(), now_ms()),
        ts_ms: now_ms(),
        params: Value::Null,
    }
    .json()
    .to_string();
    for expected in ["OK", "REPLAY_DUPLICATE"] {
        let (st, _, body) = exchange(server.port, &trusted, "POST", "/v1/decide", &call).unwrap();
        assert_eq!(st, 200, "{body}");
        let d: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(d["code"], expected, "{d}");
    }
    // Bad input is still a clear 4xx.
    let (st, _, body) = exchange(server.port, &trusted, "POST", "/v1/decide", "{").unwrap();
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("MALFORMED_JSON"), "{body}");
    // The console, with its security headers, and the admin API's refusal without credentials.
    let (st, head, _) = exchange(server.port, &trusted, "GET", "/console/", "").unwrap();
    assert_eq!(st, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-security-policy"),
        "{head}"
    );
    let (st, _, body) = exchange(server.port, &trusted, "GET", "/admin/v1/settings", "").unwrap();
    assert_eq!(st, 401, "{body}");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );

    // A client that trusts another certificate refuses the server's.
    let stranger = client(certificate(&dir, "other"));
    let err = exchange(server.port, &stranger, "GET", "/healthz", "").unwrap_err();
    assert!(err.contains("certificate"), "{err}");
}

#[test]
fn bad_tls_settings_stop_start_up_before_the_port_is_bound() {
    let dir = temp_dir("tls-bad");
    certificate(&dir, "a");
    certificate(&dir, "b");
    std::fs::write(dir.join("junk.crt"), "not a certificate").unwrap();
    let f = |n: &str| dir.join(n).display().to_string();
    let cases = [
        (format!("tls_cert_file = \"{}\"", f("a.crt")), "go together"),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
                f("missing.crt"),
                f("a.key")
            ),
            "server.tls_cert_file",
        ),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
                f("junk.crt"),
                f("a.key")
            ),
            "no PEM certificate",
        ),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
                f("a.crt"),
                f("b.key")
            ),
            "tls_key_file",
        ),
    ];
    for (tls, needle) in cases {
        let port = free_port();
        let cfg = config(&dir, port, &tls);
        let check = Command::new(support::bin())
            .args(["check", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(2), "{tls}");
        let serve = Command::new(support::bin())
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(serve.status.code(), Some(2), "{tls}");
        let err = String::from_utf8_lossy(&serve.stderr);
        assert!(err.contains(needle), "{tls}: {err}");
        // Refused before binding: the port is still free.
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
