//! The rule pipeline end to end: `rampart-rules` on a git repository holding a copy of the default
//! rule set, against real `rampart serve` processes that accept only bundles signed by their
//! configured key.

#[path = "../../engine/server/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use sha2::Digest;
use support::{agent, now_ms, temp_dir, Engine};

const RR: &str = env!("CARGO_BIN_EXE_rampart-rules");
const CI_TOKEN: &str = "ci-token-0123456789abcdef";
const ALICE_TOKEN: &str = "alice-token-0123456789abcdef";
const BOB_TOKEN: &str = "bob-token-0123456789abcdef";

/// Runs `rampart-rules` in `dir`: exit code, stdout, stderr.
fn rr(dir: &Path, args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let mut c = Command::new(RR);
    c.current_dir(dir).args(args).env_remove("RAMPART_TOKEN");
    if let Some(t) = token {
        c.env("RAMPART_TOKEN", t);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `rampart-rules promote ../bundle.json --engine <e> --stage <stage> [extra…]` with `token`.
fn promote(
    repo: &Path,
    e: &Engine,
    stage: &str,
    extra: &[&str],
    token: Option<&str>,
) -> (i32, String, String) {
    let mut args = vec![
        "promote",
        "../bundle.json",
        "--engine",
        &e.base,
        "--stage",
        stage,
    ];
    args.extend_from_slice(extra);
    rr(repo, &args, token)
}

/// Runs the plain CI script (`pipeline/ci/rules-ci.sh`) in `dir` with `rampart-rules` on PATH.
fn ci(dir: &Path, mode: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let script = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("ci/rules-ci.sh");
    let bin_dir = Path::new(RR).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(&script)
        .arg(mode)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("RAMPART_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A rules repository: the repository's default rule set and samples under `rules/`, committed.
fn rules_repo(tag: &str) -> PathBuf {
    let dir = temp_dir(tag);
    let repo = dir.join("repo");
    copy_dir(
        &Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../rules"),
        &repo.join("rules"),
    );
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "ci@example.test"]);
    git(&repo, &["config", "user.name", "CI"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "default rules"]);
    repo
}

fn sha(t: &str) -> String {
    hex_lower(&sha2::Sha256::digest(t.as_bytes()))
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An engine that trusts `pubkey` and refuses unsigned uploads; tokens for the pipeline (author),
/// alice (author) and bob (approver).
fn engine(dir: &Path, name: &str, pubkey: &str) -> Engine {
    engine_with_env(dir, name, pubkey, &[])
}

fn engine_with_env(dir: &Path, name: &str, pubkey: &str, env: &[(&str, &str)]) -> Engine {
    let tokens = [
        ("ci", "author", CI_TOKEN),
        ("alice", "author", ALICE_TOKEN),
        ("bob", "approver", BOB_TOKEN),
    ]
    .iter()
    .map(|(n, r, t)| {
        format!(
            "[[admin.tokens]]\nname = \"{n}\"\nrole = \"{r}\"\ntoken_sha256 = \"{}\"\n",
            sha(t)
        )
    })
    .collect::<String>();
    Engine::start_with_env(
        dir,
        name,
        &format!(
            "[[apps]]\nid = \"shop\"\nsecret = \"pipeline-test-secret\"\nwindow_ms = 60000\n\
             [admin]\npoll_ms = 100\nallow_unsigned_uploads = false\n\
             [[admin.bundle_keys]]\nname = \"ci\"\npublic_key = \"{pubkey}\"\n{tokens}"
        ),
        env,
    )
}

/// `engine` over HTTPS, with a fresh self-signed certificate for `localhost` (returned as a PEM
/// file beside the engine's files).
fn tls_engine(dir: &Path, name: &str, pubkey: &str) -> (Engine, PathBuf) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let env = [
        ("RAMPART_SERVER_TLS_CERT_FILE", c.as_str()),
        ("RAMPART_SERVER_TLS_KEY_FILE", k.as_str()),
    ];
    (engine_with_env(dir, name, pubkey, &env), cert)
}

fn call(e: &Engine, method: &str, path: &str, token: &str, body: Option<&str>) -> (u16, Value) {
    let a = agent();
    let url = format!("{}{path}", e.base);
    let auth = format!("Bearer {token}");
    let r = match body {
        Some(b) => a
            .post(&url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .send(b),
        None if method == "GET" => a.get(&url).header("authorization", &auth).call(),
        None => a.post(&url).header("authorization", &auth).send_empty(),
    }
    .unwrap();
    let status = r.status().as_u16();
    let text = r.into_body().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn keygen(repo: &Path, name: &str) -> String {
    let (code, out, err) = rr(repo, &["keygen", "--out", &format!("../{name}")], None);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::read_to_string(repo.join(format!("../{name}.pub")))
        .unwrap()
        .trim()
        .to_string()
}

/// A signed request for `path` from user `u<i>` (each from an address of its own).
fn decide(e: &Engine, path: &str, i: u64) -> Value {
    let user = format!("u{i}");
    let ip = format!("81.2.{}.{}", i / 200, i % 200 + 1);
    let body = support::Call {
        app: "shop",
        secret: b"pipeline-test-secret",
        path,
        body: String::new(),
        user: &user,
        ip: &ip,
        device: "",
        nonce: support::nonce("pl", i),
        ts_ms: now_ms(),
        params: json!({}),
    }
    .json();
    e.decide(&body).1
}

#[test]
fn a_rule_change_that_breaks_a_passing_sample_fails_test_and_shows_in_the_diff() {
    let repo = rules_repo("pipeline-ratchet");
    // The committed ratchet: every sample that passes today.
    let (code, out, err) = rr(&repo, &["test", "--update-ratchet"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ratchet rules/samples/ratchet.txt rewritten"),
        "{out}"
    );
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "ratchet"]);
    let (code, out, _) = rr(&repo, &["test"], None);
    assert_eq!(code, 0, "{out}");

    // Validation: located errors, exit 1.
    let xss = repo.join("rules/edge/waf-xss.rhai");
    let original = std::fs::read_to_string(&xss).unwrap();
    std::fs::write(
        &xss,
        original.replace("let a = waf(req);", "let a = waf(req;"),
    )
    .unwrap();
    let (code, out, _) = rr(&repo, &["validate"], None);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("edge/waf-xss.rhai:"), "{out}");
    let (code, out, _) = rr(&repo, &["validate", "--json"], None);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["file"], "edge/waf-xss.rhai");
    assert!(v["errors"][0]["line"].as_u64().unwrap() >= 5, "{v}");

    // A change that compiles but stops detecting XSS: `test` fails on the ratchet and prints a
    // reproduction command for each sample it broke.
    std::fs::write(
        &xss,
        original.replace("if a == \"xss\"", "if a == \"never\""),
    )
    .unwrap();
    let (code, out, _) = rr(&repo, &["validate"], None);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = rr(&repo, &["test"], None);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED: "), "{out}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("reproduce: "))
        .expect("a reproduction command");
    let cmd = line.trim_start().trim_start_matches("reproduce: ");
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let (code, out2, _) = rr(&repo, &args, None);
    assert_eq!(code, 1, "{out2}");
    assert!(
        out2.contains("FAILS") && out2.contains("expected: deny"),
        "{out2}"
    );
    let (code, out, _) = rr(&repo, &["test", "--json"], None);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(!v["regressed"].as_array().unwrap().is_empty());
    assert!(v["regressed"][0]["reproduce"]
        .as_str()
        .unwrap()
        .contains("--only"));

    // The diff against the committed version (a git ref) names the file and the changed samples.
    let (code, out, _) = rr(&repo, &["diff", "--base", "HEAD", "--json"], None);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"]["edge/waf-xss.rhai"], "modified");
    let changes = v["samples"]["changes"].as_array().unwrap();
    assert!(!changes.is_empty());
    assert_eq!(changes[0]["before"]["rule"], "waf-xss");
    assert_eq!(changes[0]["after"]["action"], "allow");
    let (code, _, _) = rr(&repo, &["diff", "--base", "HEAD", "--fail-on-change"], None);
    assert_eq!(code, 1);
    let (code, _, err) = rr(&repo, &["diff", "--base", "no-such-ref"], None);
    assert_eq!(code, 2);
    assert!(err.contains("neither a directory nor a git ref"), "{err}");

    // An explicit update gives the samples up; the ratchet then passes again.
    let (code, out, _) = rr(&repo, &["test", "--update-ratchet"], None);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains(" 0 removed"), "{out}");
    let (code, _, _) = rr(&repo, &["test"], None);
    assert_eq!(code, 0);
}

#[test]
fn tampered_and_unsigned_bundles_are_refused_by_the_cli_and_the_engine() {
    let repo = rules_repo("pipeline-tamper");
    let dir = repo.parent().unwrap().to_path_buf();
    let pubkey = keygen(&repo, "ci");
    let _other = keygen(&repo, "other");
    // A change of its own, so that the bundle is a version the engine does not have yet (the
    // unchanged copy is the built-in set).
    let ua = repo.join("rules/lists/scanner-user-agents.txt");
    let mut list = std::fs::read_to_string(&ua).unwrap();
    list.push_str("evil-scanner-9000\n");
    std::fs::write(&ua, list).unwrap();
    git(&repo, &["commit", "-q", "-am", "one more scanner"]);
    let (code, out, err) = rr(
        &repo,
        &["bundle", "--key", "../ci.key", "--out", "../b.json"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed by key"), "{out}");
    let bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("b.json")).unwrap()).unwrap();
    let e = engine(&dir, "tamper", &pubkey);
    let versions = || {
        call(&e, "GET", "/admin/v1/rulesets", BOB_TOKEN, None).1["versions"]
            .as_array()
            .map_or(0, |v| v.len())
    };
    let before = versions();

    let mut cases: Vec<(&str, Value, u16, &str)> = Vec::new();
    let mut t = bundle.clone();
    t["files"]["edge/waf-sqli.rhai"] =
        json!("//! name: waf-sqli\n//! priority: 30\n//! owner: x\n//! description: off\n()\n");
    cases.push(("a rule edited after signing", t, 400, "BUNDLE_TAMPERED"));
    let mut t = bundle.clone();
    t["files"]["edge/allow-all.rhai"] =
        json!("//! name: allow-all\n//! priority: 1\n//! owner: x\n//! description: x\nallow()\n");
    cases.push(("a file added after signing", t, 400, "BUNDLE_TAMPERED"));
    let mut t = bundle.clone();
    t["manifest"] = json!(t["manifest"]
        .as_str()
        .unwrap()
        .replace("\"message\":\"", "\"message\":\"x"));
    cases.push(("the manifest edited", t, 400, "BUNDLE_SIGNATURE_INVALID"));
    let mut t = bundle.clone();
    t.as_object_mut().unwrap().remove("signature");
    cases.push(("the signature removed", t, 403, "BUNDLE_UNSIGNED"));
    let files = bundle["files"].clone();
    cases.push((
        "a plain upload",
        json!({ "files": files, "message": "m" }),
        403,
        "BUNDLE_UNSIGNED",
    ));
    cases.push((
        "not a bundle",
        json!({ "format": "rampart-bundle/1", "files": 3 }),
        400,
        "BUNDLE_INVALID",
    ));

    // Signed by a key the engine does not trust.
    let (code, out, err) = rr(
        &repo,
        &["bundle", "--key", "../other.key", "--out", "../o.json"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let other: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("o.json")).unwrap()).unwrap();
    cases.push((
        "signed by an untrusted key",
        other,
        403,
        "BUNDLE_UNTRUSTED_KEY",
    ));

    for (what, body, status, code) in &cases {
        let (st, v) = call(
            &e,
            "POST",
            "/admin/v1/rulesets",
            CI_TOKEN,
            Some(&body.to_string()),
        );
        assert_eq!(
            (st, v["error"]["code"].as_str().unwrap_or("")),
            (*status, *code),
            "{what}: {v}"
        );
        // The CLI's verify says the same.
        let p = dir.join("t.json");
        std::fs::write(&p, body.to_string()).unwrap();
        if *code != "BUNDLE_UNSIGNED" || body.get("format").is_some() {
            let (c, out, _) = rr(
                &repo,
                &["verify", "../t.json", "--public-key", "../ci.pub", "--json"],
                None,
            );
            assert_eq!(c, 1, "{what}: {out}");
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["code"], *code, "{what}");
        }
    }
    assert_eq!(versions(), before, "a refused bundle stores nothing");
    let (_, audit) = call(
        &e,
        "GET",
        "/admin/v1/audit?action=ruleset.refused",
        BOB_TOKEN,
        None,
    );
    assert_eq!(
        audit["entries"].as_array().unwrap().len(),
        cases.len(),
        "{audit}"
    );

    // The untouched bundle verifies and is accepted, with its signer and origin recorded.
    let (c, out, _) = rr(
        &repo,
        &["verify", "../b.json", "--public-key", "../ci.pub"],
        None,
    );
    assert_eq!(c, 0, "{out}");
    let (st, v) = call(
        &e,
        "POST",
        "/admin/v1/rulesets",
        CI_TOKEN,
        Some(&bundle.to_string()),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["meta"]["signed_by"], "ci");
    assert_eq!(
        v["meta"]["origin"]["commit"],
        git(&repo, &["rev-parse", "HEAD"])
    );
    assert_eq!(versions(), before + 1);
}

#[test]
fn validate_bundle_promote_canary_approve_stable_against_a_real_engine() {
    let repo = rules_repo("pipeline-flow");
    let dir = repo.parent().unwrap().to_path_buf();
    let pubkey = keygen(&repo, "ci");
    let e = engine(&dir, "flow", &pubkey);
    let stable_before = call(&e, "GET", "/admin/v1/rollout", BOB_TOKEN, None).1["stable"]
        .as_str()
        .unwrap()
        .to_string();

    // A rule change on a branch: deny a retired endpoint at the edge.
    git(&repo, &["checkout", "-q", "-b", "retire-legacy-export"]);
    std::fs::write(
        repo.join("rules/edge/legacy-export.rhai"),
        "//! name: legacy-export\n//! priority: 12\n//! owner: secops\n\
         //! description: The legacy export endpoint was retired; nothing may call it.\n\
         if req.path.starts_with(\"/api/v0/export\") {\n    deny(\"retired endpoint\")\n}\n",
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &["commit", "-q", "-m", "Retire the legacy export endpoint"],
    );

    let (code, out, _) = rr(&repo, &["validate"], None);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = rr(&repo, &["test"], None);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = rr(&repo, &["diff", "--base", "main"], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("added    edge/legacy-export.rhai"), "{out}");
    // The plain CI script's pull-request mode keeps the diff as an artifact.
    let (code, out, err) = ci(&repo, "pr", &[("BASE_REF", "main")]);
    assert_eq!(code, 0, "{out}{err}");
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(repo.join("rules-ci-out/diff.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(d["files"]["edge/legacy-export.rhai"], "added", "{d}");
    assert!(std::fs::read_to_string(repo.join("rules-ci-out/diff.txt"))
        .unwrap()
        .contains("legacy-export"));
    let (code, out, err) = rr(
        &repo,
        &[
            "bundle",
            "--key",
            "../ci.key",
            "--out",
            "../bundle.json",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    let version = b["version"].as_str().unwrap().to_string();
    assert_eq!(b["origin"]["ref"], "retire-legacy-export");
    assert_eq!(b["origin"]["dirty"], Value::Null, "clean tree: {b}");

    // Without a token, or with a bad one, promotion fails and says why.
    let (code, _, err) = promote(&repo, &e, "canary:25", &[], None);
    assert_eq!(code, 2);
    assert!(err.contains("RAMPART_TOKEN"), "{err}");
    let (code, out, _) = promote(&repo, &e, "canary:25", &[], Some("wrong-token-0123456789"));
    assert_eq!(code, 1);
    assert!(out.contains("HTTP 401 UNAUTHENTICATED"), "{out}");
    let (code, _, err) = promote(&repo, &e, "canary:0", &[], Some(CI_TOKEN));
    assert_eq!(code, 2, "{err}");

    // Shadow first, by hand...
    let (code, out, err) = promote(&repo, &e, "shadow", &["--json"], Some(CI_TOKEN));
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["version"], version.as_str());
    assert_eq!(v["rollout"]["candidate"]["stage"], "shadow");
    assert_eq!(v["rollout"]["stable"], stable_before.as_str());
    // ...then the merge job of the CI script bundles, signs and promotes it to a 25% canary.
    let key = std::fs::read_to_string(dir.join("ci.key")).unwrap();
    let (code, out, err) = ci(
        &repo,
        "merge",
        &[
            ("RAMPART_BUNDLE_KEY", key.trim()),
            ("RAMPART_ENGINE", &e.base),
            ("RAMPART_TOKEN", CI_TOKEN),
            ("CANARY_PERCENT", "25"),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("canary at 25%"), "{out}");
    let (_, r) = call(&e, "GET", "/admin/v1/rollout", BOB_TOKEN, None);
    assert_eq!(r["candidate"]["version"], version.as_str(), "{r}");
    assert_eq!(r["candidate"]["stage"], "canary");
    assert_eq!(r["candidate"]["percent"], 25.0);
    assert_eq!(r["stable"], stable_before.as_str());
    // Some requesters now meet the new rule, the others the old set.
    let arms: Vec<(String, String)> = (0..200)
        .map(|i| {
            let v = decide(&e, "/api/v0/export", i);
            (
                v["ruleset"]["arm"].as_str().unwrap_or("").to_string(),
                v["code"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        arms.iter().any(|(a, c)| a == "canary" && c == "RULE_DENY"),
        "{arms:?}"
    );
    assert!(
        arms.iter().any(|(a, c)| a == "stable" && c == "OK"),
        "{arms:?}"
    );

    // Stable is a human's approval: the pipeline (the uploader) cannot give it, nor can an author.
    let (code, out, _) = promote(&repo, &e, "stable", &[], Some(CI_TOKEN));
    assert_eq!(code, 1);
    assert!(out.contains("HTTP 403 FORBIDDEN"), "{out}");
    let (code, out, _) = promote(&repo, &e, "stable", &[], Some(ALICE_TOKEN));
    assert_eq!(code, 1, "{out}");
    // A second person, an approver, approves: the change is stable for everyone.
    let (code, out, err) = promote(&repo, &e, "stable", &[], Some(BOB_TOKEN));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("approved: it is now stable"), "{out}");
    let (_, r) = call(&e, "GET", "/admin/v1/rollout", BOB_TOKEN, None);
    assert_eq!(r["stable"], version.as_str());
    assert!(r["candidate"].is_null(), "{r}");
    for i in 1000..1020 {
        let v = decide(&e, "/api/v0/export", i);
        assert_eq!(
            (v["code"].as_str(), v["rule"].as_str()),
            (Some("RULE_DENY"), Some("legacy-export")),
            "{v}"
        );
    }
    // The audit trail names the pipeline as uploader and stager, bob as approver.
    let (_, audit) = call(
        &e,
        "GET",
        &format!("/admin/v1/audit?target={version}"),
        BOB_TOKEN,
        None,
    );
    let acts: Vec<(String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["action"].as_str().unwrap().to_string(),
                x["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("ruleset.upload", "ci"),
        ("rollout.stage", "ci"),
        ("rollout.approve", "bob"),
    ] {
        assert!(
            acts.iter().any(|(a, b)| a == want.0 && b == want.1),
            "{want:?} in {acts:?}"
        );
    }
    let (_, meta) = call(
        &e,
        "GET",
        &format!("/admin/v1/rulesets/{version}"),
        BOB_TOKEN,
        None,
    );
    assert_eq!(meta["signed_by"], "ci", "{meta}");
    assert_eq!(meta["message"], "Retire the legacy export endpoint");

    // `record` saves the engine's decisions; `diff --traffic` replays them through both sets.
    let (code, out, err) = rr(
        &repo,
        &[
            "record",
            "--engine",
            &e.base,
            "--hours",
            "1",
            "--out",
            "../traffic.jsonl",
        ],
        Some(BOB_TOKEN),
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = rr(
        &repo,
        &[
            "diff",
            "--base",
            "main",
            "--samples",
            "none",
            "--traffic",
            "../traffic.jsonl",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["traffic"]["rows"].as_u64().unwrap() >= 220, "{v}");
    // Every replayed request went to the retired endpoint: main allows them all, the branch
    // denies them all.
    let replayed = v["traffic"]["replayed"].as_u64().unwrap();
    assert!(replayed > 0);
    assert_eq!(v["traffic"]["changed"].as_u64().unwrap(), replayed, "{v}");
    assert_eq!(
        v["traffic"]["by_rule"]["edge/legacy-export"]["gains"]
            .as_u64()
            .unwrap(),
        replayed
    );
}

#[test]
fn promote_reaches_an_https_engine_that_its_ca_file_vouches_for() {
    let repo = rules_repo("pipeline-tls");
    let dir = repo.parent().unwrap().to_path_buf();
    let pubkey = keygen(&repo, "ci");
    let (e, cert) = tls_engine(&dir, "tls", &pubkey);
    std::fs::write(
        repo.join("rules/edge/tls-test.rhai"),
        "//! name: tls-test\n//! priority: 13\n//! owner: secops\n\
         //! description: A change to promote.\nif req.path == \"/never\" {\n    deny(\"x\")\n}\n",
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "A change to promote"]);
    let (code, out, err) = rr(
        &repo,
        &["bundle", "--key", "../ci.key", "--out", "../bundle.json"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    // The public roots do not vouch for a self-signed certificate: refused, and said why.
    let (code, out, err) = promote(&repo, &e, "shadow", &[], Some(CI_TOKEN));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    let (code, _, err) = promote(
        &repo,
        &e,
        "shadow",
        &["--ca-file", "../nope.pem"],
        Some(CI_TOKEN),
    );
    assert_eq!(code, 2);
    assert!(err.contains("--ca-file"), "{err}");
    // A CA file says HTTPS is meant: with an http:// engine the token would go in clear.
    let (code, _, err) = rr(
        &repo,
        &[
            "promote",
            "../bundle.json",
            "--engine",
            "http://127.0.0.1:9",
            "--stage",
            "shadow",
            "--ca-file",
            &cert.display().to_string(),
        ],
        Some(CI_TOKEN),
    );
    assert_eq!(code, 2);
    assert!(err.contains("in clear"), "{err}");
    // With the engine's certificate as the CA, the signed bundle goes to shadow over HTTPS.
    let ca = cert.display().to_string();
    let (code, out, err) = promote(
        &repo,
        &e,
        "shadow",
        &["--ca-file", &ca, "--json"],
        Some(CI_TOKEN),
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rollout"]["candidate"]["stage"], "shadow", "{v}");
}
