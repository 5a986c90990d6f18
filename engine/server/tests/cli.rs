//! The `rampart` binary as users run it: `check`, `sign`, and `serve` end to end over real HTTP.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rampart");

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rampart-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_refuses_retention_shorter_than_the_acceptance_span() {
    let d = temp_dir("retention");
    let cfg = write(
        &d,
        "c.toml",
        "[[apps]]\nid='pay'\nsecret='x'\nwindow_ms=3000\n[state]\nnonce_retention_ms=4000\n",
    );
    let (code, _, err) = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("shorter than the acceptance span"), "{err}");
    assert!(err.contains("\"pay\""), "{err}");
}

#[test]
fn check_reports_located_problems_and_bad_toml() {
    let d = temp_dir("toml");
    let cfg = write(&d, "c.toml", "[[apps]]\nid='a'\nsecret='x'\nwindow_ms = \n");
    let (code, _, err) = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("line 4"), "{err}");
    let (code, _, err) = run(&[
        "check",
        "--config",
        d.join("missing.toml").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn check_prints_filter_sizing_and_the_seed_scenario_fits_in_64_mb() {
    let d = temp_dir("seed");
    let cfg = write(
        &d,
        "c.toml",
        "[[apps]]\nid='sale'\nsecret='x'\nwindow_ms=3000\n[state]\nexpected_rps=2000000\ntarget_fp=1e-6\nnonce_slice_ms=125\n",
    );
    let (code, out, err) = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mib: f64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory: "))
        .and_then(|l| l.strip_suffix(" MiB"))
        .expect(&out)
        .parse()
        .unwrap();
    assert!(mib <= 64.0, "{out}");
    assert!(out.contains("bits per entry"), "{out}");
    assert!(out.contains("expected false-positive rate"), "{out}");
}

/// Compact Redis mode keeps one set of bitmaps per app, each sized for the app's own rate: three
/// apps cost the sum of their three layouts, which `check` prints (it used to size one filter for
/// the whole fleet, whatever the number of apps).
#[test]
fn check_sizes_the_redis_compact_filter_per_app() {
    let d = temp_dir("redis-sizing");
    let mib_of = |out: &str, prefix: &str| -> f64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|l| l.split(" MiB").next())
            .unwrap_or_else(|| panic!("no {prefix:?} in {out}"))
            .parse()
            .unwrap()
    };
    let state = "[state]\nbackend='redis'\nredis_url='redis://127.0.0.1:1'\nnonce_mode='bloom'\nexpected_rps=20000\n";
    let one = write(
        &d,
        "one.toml",
        &format!("[[apps]]\nid='a'\nsecret='x'\n{state}"),
    );
    let three = write(
        &d,
        "three.toml",
        &format!(
            "[[apps]]\nid='a'\nsecret='x'\n[[apps]]\nid='b'\nsecret='y'\n\
             [[apps]]\nid='c'\nsecret='z'\nexpected_rps=200000\n{state}"
        ),
    );
    let (code, out1, err) = run(&["check", "--config", one.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, out3, err) = run(&["check", "--config", three.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let a = mib_of(&out1, "in Redis (compact mode): ");
    let c = mib_of(&out3, "in Redis, app c: ");
    assert_eq!(mib_of(&out3, "in Redis, app a: "), a, "{out3}");
    assert_eq!(mib_of(&out3, "in Redis, app b: "), a, "{out3}");
    assert!(c > 5.0 * a, "app c takes 10× the rate: {out3}");
    let total = mib_of(&out3, "in Redis (compact mode): ");
    assert!((total - (2.0 * a + c)).abs() < 0.2, "{out3}");
    assert!(out3.contains("for 3 app(s)"), "{out3}");
}

#[test]
fn sign_reproduces_the_contract_test_vector() {
    let (code, out, _) = run(&[
        "sign",
        "--app",
        "demo",
        "--secret",
        "demo-secret",
        "--method",
        "POST",
        "--path",
        "/api/order/pay",
        "--query",
        "b=2&a=1",
        "--timestamp",
        "1700000000000",
        "--nonce",
        "n0nce-0123456789AB",
        "--body",
        r#"{"order":"A1","amount":100}"#,
    ]);
    assert_eq!(code, 0);
    assert!(out.contains(
        "x-signature: v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33"
    ));
    let (code, _, err) = run(&["sign", "--path", "/x"]);
    assert_eq!(code, 2, "no secret given");
    assert!(err.contains("--secret"));
}

/// The shared rotation vectors (`sdk/vectors.json`).
fn rotation_vectors() -> Vec<Value> {
    let text = std::fs::read_to_string(format!(
        "{}/../../sdk/vectors.json",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["rotation"]["vectors"].as_array().unwrap().clone()
}

/// `rampart sign` of a rotation vector's request with `extra` arguments.
fn sign_vector(t: &Value, extra: &[&str]) -> (i32, String, String) {
    let s = |k: &str| t[k].as_str().unwrap().to_string();
    let ts = t["timestamp_ms"].to_string();
    let base = [
        "sign".to_string(),
        "--app".into(),
        s("app"),
        "--method".into(),
        s("method"),
        "--path".into(),
        s("path"),
        "--query".into(),
        s("query"),
        "--timestamp".into(),
        ts,
        "--nonce".into(),
        s("nonce"),
        "--body".into(),
        s("body"),
    ];
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn sign_names_a_key_and_signs_with_two_during_a_roll() {
    let v = rotation_vectors();
    let (named, roll) = (&v[1], &v[2]);
    let (code, out, err) = sign_vector(named, &["--secret", "demo-secret-2", "--key-id", "k2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "x-signature: {}\n",
            named["x-signature"].as_str().unwrap()
        )),
        "{out}"
    );
    assert!(out.contains("x-key-id: k2"), "{out}");
    let (code, out, err) = sign_vector(
        roll,
        &[
            "--secret",
            "demo-secret-2",
            "--key-id",
            "k2",
            "--also-secret",
            "demo-secret",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "x-signature: {}\n",
            roll["x-signature"].as_str().unwrap()
        )),
        "{out}"
    );
    assert!(
        !out.contains("x-key-id"),
        "two signatures name no key: {out}"
    );
    // The same from a configuration's keyring.
    let d = temp_dir("sign-keys");
    let cfg = write(
        &d,
        "c.toml",
        "[[apps]]\nid='demo'\nsecret='demo-secret'\nkeys=[{ id='k2', secret='demo-secret-2' }]\n",
    );
    let c = cfg.to_str().unwrap();
    let (code, out, err) = sign_vector(
        roll,
        &[
            "--config",
            c,
            "--key-id",
            "k2",
            "--also-key-id",
            "default",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(h["x-signature"], roll["x-signature"]);
    assert!(h.get("x-key-id").is_none(), "{h}");
    let (code, out, _) = sign_vector(
        named,
        &["--config", c, "--key-id", "k2", "--format", "json"],
    );
    assert_eq!(code, 0);
    let h: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (h["x-signature"].clone(), h["x-key-id"].clone()),
        (named["x-signature"].clone(), "k2".into())
    );
    // Without --key-id the plain secret (`default`) signs; with several keys and no default,
    // or an unknown key, it says which keys there are.
    let (code, out, _) = sign_vector(&v[0], &["--config", c, "--format", "json"]);
    assert_eq!(code, 0);
    let h: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(h["x-signature"], v[0]["x-signature"]);
    let only_keys = write(
        &d,
        "k.toml",
        "[[apps]]\nid='demo'\nkeys=[{ id='k1', secret='a' }, { id='k2', secret='b' }]\n",
    );
    let (code, _, err) = sign_vector(named, &["--config", only_keys.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("several keys (k1, k2): choose one with --key-id"),
        "{err}"
    );
    let (code, _, err) = sign_vector(named, &["--config", c, "--key-id", "k9"]);
    assert_eq!(code, 2);
    assert!(err.contains("has no key \"k9\""), "{err}");
    let (code, _, err) = sign_vector(named, &["--secret", "x", "--key-id", "bad id"]);
    assert_eq!(code, 2);
    assert!(err.contains("--key-id"), "{err}");
}

#[test]
fn check_prints_each_apps_keys_without_secrets_and_warns_about_expiry() {
    let d = temp_dir("check-keys");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[[apps]]\nid='shop'\nsecret='plain-secret-1'\nkeys=[\
             {{ id='k2', secret='soon-secret-22', not_after_ms={} }},\
             {{ id='k1', secret='gone-secret-11', not_after_ms={} }},\
             {{ id='k3', secret='next-secret-33', not_before_ms={} }}]\n\
             [[apps]]\nid='pay'\nkeys=[{{ id='p1', secret='late-secret-44', not_before_ms={} }}]\n",
            now + 2 * 86_400_000,
            now - 86_400_000,
            now + 86_400_000,
            now + 3_600_000,
        ),
    );
    let (code, out, err) = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let keys = out
        .lines()
        .find(|l| l.starts_with("app shop keys: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(keys.contains("default (always valid; active)"), "{keys}");
    assert!(keys.contains("k2 (valid until "), "{keys}");
    assert!(
        keys.contains("k1 (valid until ") && keys.contains("; expired)"),
        "{keys}"
    );
    assert!(
        keys.contains("k3 (valid from ") && keys.contains("; not yet valid)"),
        "{keys}"
    );
    assert!(
        out.contains("warning: app \"shop\": key \"k2\" expires at "),
        "{out}"
    );
    assert!(
        out.contains("warning: app \"shop\": key \"k1\" expired at "),
        "{out}"
    );
    assert!(
        out.contains("warning: app \"pay\": no configured key is valid now"),
        "{out}"
    );
    for secret in [
        "plain-secret-1",
        "soon-secret-22",
        "gone-secret-11",
        "next-secret-33",
        "late-secret-44",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} printed"
        );
    }
    // Bad keys are refused before anything starts, each with its place.
    let bad = write(
        &d,
        "bad.toml",
        "[[apps]]\nid='shop'\nkeys=[{ id='k1', secret='x', not_before_ms=9, not_after_ms=5 }, { id='k1', secret='' }]\n",
    );
    let (code, _, err) = run(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("keys[0] (\"k1\"): not_before_ms (9) must be before not_after_ms (5)"),
        "{err}"
    );
    assert!(err.contains("keys[1] (\"k1\"): duplicate key id"), "{err}");
    assert!(
        err.contains("keys[1] (\"k1\"): the secret is empty"),
        "{err}"
    );
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

fn start(cfg: &Path) -> Server {
    let text = std::fs::read_to_string(cfg).unwrap();
    let addr = text
        .lines()
        .find_map(|l| l.strip_prefix("listen = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    let child = Command::new(BIN)
        .args(["serve", "--config", cfg.to_str().unwrap()])
        // The hot-swap test uploads plain sets (dev mode); signing has tests of its own.
        .env("RAMPART_ADMIN_ALLOW_UNSIGNED_UPLOADS", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let s = Server {
        child,
        base: format!("http://{addr}"),
    };
    let a = agent();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = a.get(&format!("{}/readyz", s.base)).call() {
            if r.status() == 200 {
                return s;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("server did not become ready");
}

fn decide(base: &str, body: &str) -> (u16, Value) {
    let mut r = agent()
        .post(&format!("{base}/v1/decide"))
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

#[test]
fn serve_end_to_end_signed_request_then_replay_then_graceful_stop() {
    let d = temp_dir("serve");
    let port = free_port();
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[[apps]]\nid = \"demo\"\nsecret_env = \"E2E_SECRET_{port}\"\nwindow_ms = 5000\n\
             [decision_log]\ndir = \"{}\"\n",
            d.join("log").display()
        ),
    );
    // secret_env is resolved by both the server and `sign --config` (children inherit it).
    std::env::set_var(format!("E2E_SECRET_{port}"), "e2e-secret");

    let server = start(&cfg);
    // No admin user configured: the bootstrap admin's password file is readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let f = d.join("control/initial-admin-password");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", f.display());
        assert!(std::fs::read_to_string(&f).unwrap().trim().len() >= 12);
    }
    let (code, body, err) = run(&[
        "sign",
        "--config",
        cfg.to_str().unwrap(),
        "--app",
        "demo",
        "--method",
        "POST",
        "--path",
        "/api/order/pay",
        "--body",
        r#"{"order":"A1","amount":100}"#,
        "--user",
        "u-1",
        "--format",
        "decide",
    ]);
    assert_eq!(code, 0, "{err}");
    let (s, first) = decide(&server.base, &body);
    assert_eq!((s, first["code"].as_str()), (200, Some("OK")), "{first}");
    let (_, replay) = decide(&server.base, &body);
    assert_eq!(replay["code"], "REPLAY_DUPLICATE");
    assert_eq!(replay["status"], 409);

    // SIGTERM: the server drains the decision log before it exits.
    let mut server = server;
    Command::new("kill")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = server.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("e2e-secret"), "secrets are never logged");
    let rows: Vec<Value> = std::fs::read_dir(d.join("log"))
        .unwrap()
        // The log files, not the directory's lock.
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("decisions-")
        })
        .flat_map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["decision_id"], first["decision_id"]);
    assert_eq!(rows[1]["code"], "REPLAY_DUPLICATE");
}

#[test]
fn serve_refuses_bad_config_before_binding() {
    let d = temp_dir("refuse");
    let port = free_port();
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[[apps]]\nid = \"a\"\nwindow_ms = 5000\n"
        ),
    );
    let (code, _, err) = run(&["serve", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("secret or secret_env is required"), "{err}");
    // The port was never bound.
    assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
}

fn rule_file(name: &str, body: &str) -> String {
    format!(
        "//! name: {name}\n//! priority: 10\n//! owner: secops\n//! description: test\n{body}\n"
    )
}

fn write_rules(dir: &Path, files: &[(&str, String)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// API tokens the hot-swap test configures: `ci` (author) and `lead` (approver).
const AUTHOR: &str = "Bearer cli-author-token-0001";
const LEAD: &str = "Bearer cli-approver-token-01";
const TOKENS: &str = "[[admin.tokens]]\nname = \"ci\"\nrole = \"author\"\ntoken_sha256 = \"41b4bdf0620ae5db330250b7610594f15cb08f90f16eacd24f850b3db4b4c815\"\n\
                      [[admin.tokens]]\nname = \"lead\"\nrole = \"approver\"\ntoken_sha256 = \"0e3451926b3109d654fad18f3942b8f175b77c1525fc0602b907e23343e9e4fa\"\n";

fn admin_post(url: &str, auth: &str, body: &Value) -> (u16, Value) {
    let mut r = agent()
        .post(url)
        .header("authorization", auth)
        .send(body.to_string().as_str())
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap(),
    )
}

fn get_json(url: &str) -> Value {
    let mut r = agent()
        .get(url)
        .header("authorization", LEAD)
        .call()
        .unwrap();
    serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
}

#[test]
fn check_rejects_a_broken_rule_directory_with_located_errors() {
    let d = temp_dir("badrules");
    let rules = d.join("rules");
    write_rules(
        &rules,
        &[(
            "edge/x.rhai",
            rule_file("x", "if req.ip == { deny(\"x\") }"),
        )],
    );
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[[apps]]\nid='a'\nsecret='s'\n[rules]\ndir = \"{}\"\n",
            rules.display()
        ),
    );
    let (code, _, err) = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("edge/x.rhai:6:1"), "{err}");
}

#[test]
fn hot_swap_under_concurrent_load_fails_no_request_and_the_directory_reloads() {
    let d = temp_dir("swap");
    let rules = d.join("rules");
    write_rules(&rules, &[("edge/allow.rhai", rule_file("base", "()"))]);
    let port = free_port();
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[[apps]]\nid = \"demo\"\nsecret = \"swap-secret\"\nwindow_ms = 60000\n\
             [rules]\ndir = \"{}\"\nreload_interval_ms = 200\n[decision_log]\ndir = \"{}\"\n{TOKENS}",
            rules.display(),
            d.join("log").display()
        ),
    );
    let server = start(&cfg);
    let base = server.base.clone();
    let current = get_json(&format!("{base}/admin/v1/rulesets/current"));
    assert_eq!(
        current["rules"][0]["name"], "base",
        "loaded from [rules] dir at start"
    );
    let initial = current["version"].as_str().unwrap().to_string();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (base, stop) = (base.clone(), stop.clone());
            std::thread::spawn(move || {
                let a = agent();
                let (mut ok, mut failed) = (0u32, Vec::new());
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 20_000 {
                    i += 1;
                    let body = serde_json::json!({"app": "demo", "request": {"path": format!("/w{w}/{i}")}}).to_string();
                    match a.post(&format!("{base}/v1/decide")).send(body.as_str()) {
                        Ok(mut r) if r.status() == 200 => {
                            let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
                            if v["code"].is_string() {
                                ok += 1;
                            } else {
                                failed.push(v.to_string());
                            }
                        }
                        Ok(r) => failed.push(format!("status {}", r.status())),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();

    // 50 swaps through the admin API while the load runs (upload, shadow, approval by a second
    // person); every other upload is broken.
    let mut published = 0;
    for i in 0..50 {
        let files = if i % 2 == 0 {
            serde_json::json!({"files": {"edge/a.rhai": rule_file(&format!("r{i}"), &format!("if req.path == \"/never/{i}\" {{ deny(\"x\") }}"))}})
        } else {
            serde_json::json!({"files": {"edge/a.rhai": rule_file("broken", "if {")}})
        };
        let (st, v) = admin_post(&format!("{base}/admin/v1/rulesets"), AUTHOR, &files);
        assert_eq!(st, if i % 2 == 0 { 201 } else { 422 }, "{v}");
        if i % 2 == 0 {
            let version = v["version"].clone();
            let (st, v) = admin_post(
                &format!("{base}/admin/v1/rollout"),
                AUTHOR,
                &serde_json::json!({"version": version, "stage": "shadow"}),
            );
            assert_eq!(st, 200, "{v}");
            let (st, v) = admin_post(
                &format!("{base}/admin/v1/rollout/approve"),
                LEAD,
                &serde_json::json!({ "version": version }),
            );
            assert_eq!(st, 200, "{v}");
            assert_eq!(v["stable"], version);
            published += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        let (ok, failed) = w.join().unwrap();
        assert!(
            failed.is_empty(),
            "failed requests during swaps: {:?}",
            &failed[..failed.len().min(3)]
        );
        total += ok;
    }
    assert!(total > 100, "the load actually ran ({total})");
    assert_eq!(published, 25);
    let after_uploads = get_json(&format!("{base}/admin/v1/rulesets/current"))["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(after_uploads, initial);

    // Editing the directory publishes a new set within a few reload intervals.
    write_rules(&rules, &[("gateway/new.rhai", rule_file("new-rule", "()"))]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cur = get_json(&format!("{base}/admin/v1/rulesets/current"));
        if cur["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "new-rule")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "directory change not picked up: {cur}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A broken edit keeps the live set.
    write_rules(
        &rules,
        &[("gateway/new.rhai", rule_file("new-rule", "if {"))],
    );
    std::thread::sleep(Duration::from_millis(800));
    let cur = get_json(&format!("{base}/admin/v1/rulesets/current"));
    assert!(cur["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "new-rule"));
    let metrics = agent()
        .get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        metrics.contains("rampart_ruleset_rejected_total 26"),
        "{metrics}"
    );
}

#[test]
fn demo_traffic_brings_every_kind_of_decision_within_seconds() {
    let d = temp_dir("demo");
    let port = free_port();
    // The embedded defaults' demo app and the built-in rules.
    let cfg = write(
        &d,
        "c.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[[apps]]\nid = \"demo\"\nsecret = \"demo-secret\"\nwindow_ms = 30000\n\
             [decision_log]\ndir = \"{}\"\n{TOKENS}",
            d.join("log").display()
        ),
    );
    let server = start(&cfg);
    let (code, out, err) = run(&[
        "demo",
        "--url",
        &server.base,
        "--duration",
        "6",
        "--rps",
        "250",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["errors"], 0, "{v}");
    assert!(v["requests"].as_u64().unwrap() > 500, "{v}");
    for c in [
        "OK",
        "REPLAY_DUPLICATE",
        "RULE_DENY",
        "TIMESTAMP_SKEW",
        "SIGNATURE_INVALID",
        "RATE_LIMITED",
    ] {
        assert!(v["by_code"][c].as_u64().unwrap_or(0) > 0, "no {c}: {v}");
    }
    // The decision log saw them too (what the console's charts read).
    let stats = get_json(&format!("{}/admin/v1/stats?by=code", server.base));
    let codes: Vec<&str> = stats["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert!(codes.len() >= 5, "{stats}");
    // A wrong URL is a clear error, not a hang.
    let (code, _, err) = run(&["demo", "--url", "ftp://x", "--duration", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("http://"), "{err}");
}
