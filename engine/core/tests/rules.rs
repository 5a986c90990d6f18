//! The rule runtime: validation with located errors, tiers, priorities, scoping, shadow mode,
//! scores, lists, bounds and per-tier error defaults — through the whole decision path.

use std::sync::Arc;

use rampart_core::engine::EngineSettings;
use rampart_core::model::{Action, Code, DecideRequest, JudgedRequest};
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy};
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::fingerprint::LocalFingerprintStore;
use rampart_core::replay::nonce::BloomNonceStore;
use rampart_core::replay::sign::{sign, ToSign};
use rampart_core::rules::{LiveRules, RuleSet, RuleSettings, RuleState, Source};
use rampart_core::{Engine, Step};

const SECRET: &[u8] = b"rules-secret";

fn src(path: &str, text: &str) -> Source {
    Source {
        path: path.into(),
        text: text.into(),
    }
}

fn rule(path: &str, name: &str, priority: i64, extra_meta: &str, body: &str) -> Source {
    src(
        path,
        &format!(
            "//! name: {name}\n//! priority: {priority}\n//! owner: test\n//! description: test rule\n{extra_meta}{body}\n"
        ),
    )
}

fn engine_with(set: RuleSet) -> (Engine, Arc<LiveRules>) {
    let live = Arc::new(LiveRules::new(set));
    let e = Engine::new(
        EngineSettings {
            apps: vec![
                AppPolicy::new("shop", SECRET, 5_000),
                AppPolicy::new("pay", SECRET, 5_000),
            ],
            routes: vec![],
            default_dedup: DedupPolicy {
                window_ms: 0,
                ..DedupPolicy::default()
            },
            on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
            challenge_status: 403,
        },
        Arc::new(BloomNonceStore::new(
            SlicedBloomConfig {
                expected_rps: 10_000,
                slice_ms: 100,
                retention_ms: 10_000,
                max_window_ms: 5_000,
                target_fp: 1e-6,
            },
            5,
        )),
        Arc::new(LocalFingerprintStore::new(1000)),
        live.clone(),
    );
    (e, live)
}

static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn request(app: &str, path: &str, ip: &str, ua: &str, signed: bool) -> DecideRequest {
    let n = NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nonce = format!("rules-nonce-{n:08}");
    let mut r = JudgedRequest {
        method: "POST".into(),
        path: path.into(),
        body: Some("{}".into()),
        ..Default::default()
    };
    if signed {
        let h = sign(
            SECRET,
            &ToSign {
                app,
                method: "POST",
                path,
                query: "",
                body: b"{}",
                timestamp_ms: 1_000_000,
                nonce: &nonce,
            },
        );
        r.headers.insert("x-timestamp".into(), h.timestamp);
        r.headers.insert("x-nonce".into(), h.nonce);
        r.headers.insert("x-signature".into(), h.signature);
    }
    let mut d = DecideRequest {
        app: app.into(),
        request: r,
        user_id: Some("u1".into()),
        ..Default::default()
    };
    d.client.ip = Some(ip.into());
    d.client.user_agent = Some(ua.into());
    d
}

fn compile(sources: &[Source]) -> RuleSet {
    RuleSet::compile(sources, RuleSettings::default(), &RuleState::local(1000))
        .unwrap_or_else(|e| panic!("{e:#?}"))
}

#[test]
fn broken_sets_report_every_failure_with_file_line_and_column() {
    let errs = RuleSet::compile(
        &[
            rule(
                "edge/syntax.rhai",
                "syntax",
                1,
                "",
                "if req.ip == { deny(\"x\") }",
            ),
            rule(
                "edge/unknown.rhai",
                "unknown",
                2,
                "",
                "let x = 1;\nif launch_missiles(req.ip) { deny(\"x\") }",
            ),
            src("edge/nometa.rhai", "deny(\"x\")"),
            rule("gateway/dup.rhai", "same", 1, "", "()"),
            rule("business/dup.rhai", "same", 1, "", "()"),
            rule(
                "edge/var.rhai",
                "var",
                3,
                "",
                "if undefined_variable > 1 { deny(\"x\") }",
            ),
            rule("nowhere/x.rhai", "nowhere", 1, "", "()"),
            src("lists/bad.ips", "10.0.0.0/8\nnot-an-ip\n"),
            rule("edge/mode.rhai", "mode", 1, "//! mode: sometimes\n", "()"),
        ],
        RuleSettings::default(),
        &RuleState::local(1000),
    )
    .unwrap_err();
    let shown: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| shown.iter().any(|s| s.contains(needle));
    assert!(has("edge/syntax.rhai:6:1: Expecting"), "{shown:#?}");
    assert!(
        has("edge/unknown.rhai:6:4: unknown helper or function `launch_missiles`"),
        "{shown:#?}"
    );
    assert!(
        has("edge/nometa.rhai:1:1: missing metadata `//! name"),
        "{shown:#?}"
    );
    assert!(has("duplicate rule name \"same\""), "{shown:#?}");
    assert!(has("edge/var.rhai:5:"), "{shown:#?}");
    assert!(
        has("nowhere/x.rhai:1:1: rules live in edge/, gateway/ or business/"),
        "{shown:#?}"
    );
    assert!(has("lists/bad.ips:2:1"), "{shown:#?}");
    assert!(
        has("edge/mode.rhai:5:1: mode must be enforce or shadow"),
        "{shown:#?}"
    );
}

#[test]
fn tiers_run_in_order_and_the_first_terminal_action_wins() {
    let set = compile(&[
        src("lists/blocked.ips", "203.0.113.0/24\n"),
        src("lists/scanners.txt", "sqlmap\nnikto\n"),
        rule(
            "edge/blocklist.rhai",
            "ip-blocklist",
            10,
            "",
            "if ip_in(\"blocked\", req.ip) { deny(\"blocked network\") }",
        ),
        rule(
            "edge/scanner.rhai",
            "scanner-ua",
            20,
            "",
            "if contains_any(\"scanners\", req.user_agent) { deny(\"scanner\") }",
        ),
        rule(
            "gateway/challenge.rhai",
            "odd-path",
            10,
            "",
            "if req.path.contains(\"admin\") { challenge(\"odd path\") }",
        ),
        rule(
            "business/review.rhai",
            "big-order",
            10,
            "",
            "if req.path == \"/api/review\" { review(\"manual check\") }",
        ),
    ]);
    let (e, _) = engine_with(set);
    let v = e
        .decide(
            &request("shop", "/api/order", "203.0.113.9", "Mozilla", false),
            1_000_000,
        )
        .unwrap();
    assert_eq!(
        (v.code, v.step, v.rule.as_deref()),
        (Code::RuleDeny, Step::Edge, Some("ip-blocklist"))
    );
    assert_eq!(v.tier, Some("edge"));
    // Edge runs before the signature: an unsigned scanner is stopped by the edge, not the signature.
    let v = e
        .decide(
            &request("shop", "/api/order", "198.51.100.1", "sqlmap/1.7", false),
            1_000_000,
        )
        .unwrap();
    assert_eq!(v.rule.as_deref(), Some("scanner-ua"));
    let v = e
        .decide(
            &request("shop", "/admin", "198.51.100.1", "Mozilla", true),
            1_000_000,
        )
        .unwrap();
    assert_eq!(
        (v.action, v.code, v.status, v.tier),
        (Action::Challenge, Code::RuleChallenge, 403, Some("gateway"))
    );
    let v = e
        .decide(
            &request("shop", "/api/review", "198.51.100.1", "Mozilla", true),
            1_000_000,
        )
        .unwrap();
    assert_eq!(
        (v.action, v.code, v.status),
        (Action::Review, Code::RuleReview, 200)
    );
    let v = e
        .decide(
            &request("shop", "/api/order", "198.51.100.1", "Mozilla", true),
            1_000_000,
        )
        .unwrap();
    assert_eq!(v.code, Code::Ok);
    assert!(!v.ruleset_version.is_empty() && v.ruleset_version != "none");
}

#[test]
fn priorities_order_rules_within_a_tier_and_allow_ends_the_tier() {
    let set = compile(&[
        rule("edge/b.rhai", "second", 20, "", "deny(\"second\")"),
        rule(
            "edge/a.rhai",
            "first",
            10,
            "",
            "if req.ip == \"192.0.2.1\" { allow() } else { deny(\"first\") }",
        ),
    ]);
    let (e, _) = engine_with(set);
    let v = e
        .decide(&request("shop", "/x", "192.0.2.2", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(v.rule.as_deref(), Some("first"));
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        v.code,
        Code::Ok,
        "allow() skipped the rest of the edge tier"
    );
}

#[test]
fn rules_scoped_to_apps_and_routes_are_not_evaluated_elsewhere() {
    let set = compile(&[rule(
        "gateway/pay.rhai",
        "pay-only",
        10,
        "//! apps: pay\n//! routes: /api/pay/*, /checkout\n",
        "deny(\"pay route\")",
    )]);
    let (e, live) = engine_with(set);
    for (app, path) in [
        ("shop", "/api/pay/x"),
        ("pay", "/api/order"),
        ("pay", "/checkout/2"),
    ] {
        let v = e
            .decide(&request(app, path, "192.0.2.1", "ua", true), 1_000_000)
            .unwrap();
        assert_eq!(v.code, Code::Ok, "{app} {path}");
    }
    let snap = live.snapshot();
    assert_eq!(
        snap.counters().0,
        0,
        "out-of-scope rules are never evaluated"
    );
    for path in ["/api/pay/x", "/checkout"] {
        let v = e
            .decide(&request("pay", path, "192.0.2.1", "ua", true), 1_000_000)
            .unwrap();
        assert_eq!(v.rule.as_deref(), Some("pay-only"), "{path}");
    }
    assert_eq!(snap.counters().0, 2);
}

#[test]
fn shadow_rules_never_change_the_action() {
    let set = compile(&[
        rule(
            "edge/s.rhai",
            "shadow-deny",
            10,
            "//! mode: shadow\n",
            "deny(\"would deny\")",
        ),
        rule(
            "business/s.rhai",
            "shadow-review",
            10,
            "//! mode: shadow\n",
            "review(\"would review\")",
        ),
    ]);
    let (e, _) = engine_with(set);
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!((v.action, v.code), (Action::Allow, Code::Ok));
    let names: Vec<&str> = v.shadow.iter().map(|s| s.rule.as_str()).collect();
    assert_eq!(names, ["shadow-deny", "shadow-review"]);
    assert_eq!(v.shadow[0].action, Action::Deny);
    // Also when another step rejects: the shadow hits seen so far are reported.
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", false), 1_000_000)
        .unwrap();
    assert_eq!(v.code, Code::SignatureMissing);
    assert_eq!(v.shadow.len(), 1);
}

#[test]
fn scores_add_up_across_tiers_to_the_thresholds() {
    let set = compile(&[
        rule(
            "edge/a.rhai",
            "new-device",
            10,
            "",
            "score(30, \"new device\")",
        ),
        rule(
            "gateway/b.rhai",
            "odd-hour",
            10,
            "",
            "if req.path == \"/big\" { score(45, \"odd\") }",
        ),
        rule(
            "business/c.rhai",
            "big",
            10,
            "",
            "if req.path == \"/big\" && req.ip == \"192.0.2.9\" { score(40, \"big\") }",
        ),
    ]);
    let (e, _) = engine_with(set);
    let v = e
        .decide(
            &request("shop", "/small", "192.0.2.1", "ua", true),
            1_000_000,
        )
        .unwrap();
    assert_eq!(v.code, Code::Ok, "30 < challenge threshold 40");
    let v = e
        .decide(&request("shop", "/big", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        (v.action, v.code, v.rule.as_deref()),
        (Action::Review, Code::RuleReview, Some("score")),
        "75"
    );
    let v = e
        .decide(&request("shop", "/big", "192.0.2.9", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!((v.action, v.code), (Action::Deny, Code::RuleDeny), "115");
    assert!(v.reasons.len() >= 4, "{:?}", v.reasons);
}

#[test]
fn runaway_scripts_are_cut_off_and_answered_by_the_tier_default() {
    let sources = [
        rule("edge/loop.rhai", "infinite-loop", 10, "", "loop { }"),
        rule(
            "edge/grow.rhai",
            "string-growth",
            20,
            "",
            "let s = \"x\"; loop { s += s; }",
        ),
        rule(
            "edge/garbage.rhai",
            "garbage",
            30,
            "",
            // A list named at run time (a literal name of a missing list is a compile error).
            "let l = \"no-such\" + \"-list\"; ip_in(l, 42)",
        ),
        rule(
            "edge/badcode.rhai",
            "bad-code",
            40,
            "",
            "deny(\"NOT_A_CODE\", \"x\")",
        ),
        rule("edge/notanaction.rhai", "not-an-action", 35, "", "42"),
    ];
    // Fail-open edge: every broken rule is counted and skipped.
    let (e, live) = engine_with(compile(&sources));
    let t = std::time::Instant::now();
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(v.code, Code::Ok);
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "bounded");
    assert_eq!(live.snapshot().counters().1, 5);
    assert!(live.snapshot().rules().iter().all(|r| r.errors == 1));
    // Fail-closed edge: the first broken rule denies.
    let settings = RuleSettings {
        on_error: [FailPolicy::Deny, FailPolicy::Allow, FailPolicy::Allow],
        ..RuleSettings::default()
    };
    let (e, _) =
        engine_with(RuleSet::compile(&sources, settings, &RuleState::local(1000)).unwrap());
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        (v.code, v.rule.as_deref()),
        (Code::RuleDeny, Some("infinite-loop"))
    );
}

#[test]
fn helpers_see_the_typed_request() {
    let set = compile(&[rule(
        "business/p.rhai",
        "params",
        10,
        "",
        "if req.param(\"qty\") > 5 && req.header(\"X-Coupon\") == \"SPRING\" && req.user == \"u1\" && req.method == \"POST\" { deny(\"QUOTA_EXHAUSTED\", \"too many\") }",
    )]);
    let (e, _) = engine_with(set);
    let mut r = request("shop", "/x", "192.0.2.1", "ua", true);
    r.params = Some(serde_json::json!({"qty": 6}));
    r.request.headers.insert("x-coupon".into(), "SPRING".into());
    let v = e.decide(&r, 1_000_000).unwrap();
    assert_eq!((v.code, v.status), (Code::QuotaExhausted, 409));
}

#[test]
fn swapping_the_live_set_is_atomic_per_decision() {
    let a = compile(&[rule("edge/a.rhai", "a", 1, "", "()")]);
    let b = compile(&[rule("edge/b.rhai", "b", 1, "", "deny(\"b\")")]);
    let (e, live) = engine_with(a);
    let va = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    live.swap(b);
    let vb = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(va.code, Code::Ok);
    assert_eq!(vb.rule.as_deref(), Some("b"));
    assert_ne!(va.ruleset_version, vb.ruleset_version);
}

#[test]
fn rate_limits_and_counters_keep_state_across_decisions_and_swaps() {
    let state = RuleState::local(10_000);
    let sources = [
        rule(
            "gateway/ip.rhai",
            "per-ip",
            10,
            "",
            "if !rate_limit(\"ip:\" + req.ip, 10, 3) { deny(\"RATE_LIMITED\", \"too fast\") }",
        ),
        rule(
            "business/orders.rhai",
            "order-velocity",
            10,
            "//! routes: /api/order\n",
            "if count(\"orders:\" + req.user, 60000) > 2 { review(\"many orders\") }",
        ),
    ];
    let set = RuleSet::compile(&sources, RuleSettings::default(), &state).unwrap();
    let (e, live) = engine_with(set);
    let at = |path: &str, ip: &str| request("shop", path, ip, "ua", true);
    // Three at once pass (burst), the fourth is limited with a retry hint.
    for _ in 0..3 {
        assert_eq!(
            e.decide(&at("/x", "192.0.2.50"), 1_000_000).unwrap().code,
            Code::Ok
        );
    }
    let v = e.decide(&at("/x", "192.0.2.50"), 1_000_000).unwrap();
    assert_eq!(
        (v.code, v.status, v.tier),
        (Code::RateLimited, 429, Some("gateway"))
    );
    assert_eq!(v.retry_after_ms, Some(100));
    // The limit survives a swap to an edited set.
    live.swap(RuleSet::compile(&sources, RuleSettings::default(), &state).unwrap());
    assert_eq!(
        e.decide(&at("/x", "192.0.2.50"), 1_000_050).unwrap().code,
        Code::RateLimited
    );
    assert_eq!(
        e.decide(&at("/x", "192.0.2.50"), 1_000_100).unwrap().code,
        Code::Ok
    );
    // Order velocity per user (same user id "u1" on every request).
    let codes: Vec<Code> = (0..3)
        .map(|i| {
            e.decide(&at("/api/order", &format!("198.51.100.{i}")), 1_000_000)
                .unwrap()
                .code
        })
        .collect();
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::RuleReview]);
}

#[test]
fn the_standard_library_is_not_an_unknown_helper_and_deny_needs_a_deny_code() {
    let set = compile(&[
        rule("edge/std.rhai", "std", 10, "", "let n = parse_int(\"42\"); if max(n, 1) > 41 && n.to_string().len() == 2 { score(1, \"std ok\") }"),
        rule("edge/ok.rhai", "deny-ok", 20, "", "deny(\"OK\", \"sneaky\")"),
    ]);
    let (e, live) = engine_with(set);
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        v.code,
        Code::Ok,
        "deny(\"OK\") is a rule error, answered by the fail-open default"
    );
    assert_eq!(live.snapshot().counters().1, 1);
}

#[test]
fn waf_helper_scans_every_attacker_controlled_part() {
    let set = compile(&[rule(
        "edge/waf.rhai",
        "waf",
        10,
        "",
        "let hit = waf(req); if hit != \"\" { deny(\"waf: \" + hit) }",
    )]);
    let (e, _) = engine_with(set);
    let mut sqli = request("shop", "/search", "192.0.2.1", "ua", false);
    sqli.request.query = "q=1%27%20OR%20%271%27%3D%271%27%20--".into();
    let v = e.decide(&sqli, 1_000_000).unwrap();
    assert_eq!((v.code, v.rule.as_deref()), (Code::RuleDeny, Some("waf")));
    assert_eq!(v.reasons[0].message, "waf: sqli");
    let mut xss = request("shop", "/comment", "192.0.2.1", "ua", false);
    xss.params = Some(serde_json::json!({"text": "<script>alert(document.cookie)</script>"}));
    assert_eq!(
        e.decide(&xss, 1_000_000).unwrap().reasons[0].message,
        "waf: xss"
    );
    let mut lfi = request("shop", "/download", "192.0.2.1", "ua", false);
    lfi.request.body = Some("{\"file\":\"../../../../etc/passwd\"}".into());
    assert_eq!(
        e.decide(&lfi, 1_000_000).unwrap().reasons[0].message,
        "waf: traversal"
    );
    // A benign order with apostrophes and an international address passes to the signature step.
    let mut ok = request("shop", "/api/order", "192.0.2.1", "ua", false);
    ok.params = Some(
        serde_json::json!({"name": "Seán O'Brien", "street": "Straße 12", "note": "leave at door & ring"}),
    );
    assert_eq!(
        e.decide(&ok, 1_000_000).unwrap().code,
        Code::SignatureMissing
    );
}

fn with_user(mut d: DecideRequest, user: &str, device: &str) -> DecideRequest {
    d.user_id = Some(user.into());
    d.client.device_id = Some(device.into());
    d
}

#[test]
fn distinct_counts_accounts_per_device() {
    let sources = [rule(
        "business/device.rhai",
        "device-many-accounts",
        10,
        "",
        "if distinct(\"dev-acct:\" + req.device_id, req.user, 3600000) > 3 { review(\"one device, many accounts\") }",
    )];
    let (e, _) = engine_with(compile(&sources));
    let mut codes = Vec::new();
    for (i, user) in ["a", "b", "a", "c", "d", "b", "e"].iter().enumerate() {
        let d = with_user(
            request("shop", "/x", &format!("192.0.2.{i}"), "ua", true),
            user,
            "dev-1",
        );
        codes.push(e.decide(&d, 1_000_000).unwrap().code);
    }
    // a, b, a, c: 3 distinct; d is the 4th; b again is still 4; e makes 5.
    use Code::*;
    assert_eq!(codes, [Ok, Ok, Ok, Ok, RuleReview, RuleReview, RuleReview]);
    // Another device is counted apart.
    let d = with_user(
        request("shop", "/x", "192.0.2.99", "ua", true),
        "z",
        "dev-2",
    );
    assert_eq!(e.decide(&d, 1_000_000).unwrap().code, Ok);
}

#[test]
fn claims_are_once_per_user_never_oversold_and_shadow_claims_change_nothing() {
    let state = RuleState::local(10_000);
    let lottery = rule(
        "business/lottery.rhai",
        "lottery-claim",
        90,
        "//! routes: /api/lottery/draw\n",
        r#"let c = claim("lottery:live-1", req.user, 2);
if c == "duplicate" { return deny("QUOTA_EXHAUSTED", "one prize per user"); }
if c == "exhausted" { return deny("QUOTA_EXHAUSTED", "no prizes left"); }
allow()"#,
    );
    let shadow = rule(
        "business/coupon-shadow.rhai",
        "coupon-claim-shadow",
        10,
        "//! mode: shadow\n//! routes: /api/lottery/draw\n",
        r#"if claim("coupon:x", req.user, 1) != "granted" { deny("QUOTA_EXHAUSTED", "coupon used") }"#,
    );
    let set = RuleSet::compile(&[lottery, shadow], RuleSettings::default(), &state).unwrap();
    let (e, _) = engine_with(set);
    let draw = |user: &str| {
        let d = with_user(
            request("shop", "/api/lottery/draw", "192.0.2.7", "ua", true),
            user,
            "dev",
        );
        e.decide(&d, 1_000_000).unwrap()
    };
    assert_eq!(draw("u1").code, Code::Ok);
    let again = draw("u1");
    assert_eq!((again.code, again.status), (Code::QuotaExhausted, 409));
    assert_eq!(draw("u2").code, Code::Ok);
    let late = draw("u3");
    assert_eq!(late.code, Code::QuotaExhausted);
    assert!(late.reasons[0].message.contains("no prizes left"));
    assert_eq!(state.quotas.claimed("lottery:live-1").unwrap(), 2);
    // The shadow rule only looked: its pool is untouched, and it reported what it would do.
    assert_eq!(state.quotas.claimed("coupon:x").unwrap(), 0);
    assert!(
        late.shadow.is_empty(),
        "u3 would have been granted the coupon"
    );
}

#[test]
fn later_tiers_teach_the_edge_tier_through_reputation() {
    let sources = [
        rule(
            "edge/reputation.rhai",
            "bad-reputation",
            10,
            "",
            "if reputation(req) >= 20 { challenge(\"bad reputation\") } else if reputation(\"ja3\", req.ja3) > 0 { score(10, \"seen misbehaving\") }",
        ),
        rule(
            "business/abuse.rhai",
            "coupon-abuse",
            10,
            "//! routes: /api/coupon\n",
            "if req.param(\"coupon\") == \"STOLEN\" { deny(\"coupon abuse\") }",
        ),
    ];
    let (e, _) = engine_with(compile(&sources));
    let bot = |path: &str, ip: &str| {
        let mut d = request("shop", path, ip, "ua", true);
        d.client.ja3 = Some("ja3-bot".into());
        d.params = Some(serde_json::json!({"coupon": "STOLEN"}));
        d
    };
    // Before: the edge tier knows nothing.
    assert_eq!(
        e.decide(&bot("/home", "192.0.2.1"), 1_000_000)
            .unwrap()
            .code,
        Code::Ok
    );
    // The business tier refuses twice (10 points each to ip, device, ja3 and user).
    for i in 0..2 {
        let v = e
            .decide(
                &bot("/api/coupon", &format!("192.0.2.{}", 10 + i)),
                1_000_000,
            )
            .unwrap();
        assert_eq!((v.code, v.tier), (Code::RuleDeny, Some("business")));
    }
    // Now the same JA3 and user, from a fresh IP, are challenged at the edge.
    let v = e.decide(&bot("/home", "192.0.2.200"), 1_000_000).unwrap();
    assert_eq!((v.action, v.tier), (Action::Challenge, Some("edge")));
    // A client that shares nothing with the bot is not.
    let mut clean = request("shop", "/home", "192.0.2.201", "ua", true);
    clean.user_id = Some("someone-else".into());
    assert_eq!(e.decide(&clean, 1_000_000).unwrap().code, Code::Ok);
    // Signature failures never write reputation.
    let mut forged = request("shop", "/api/coupon", "192.0.2.250", "ua", true);
    forged.user_id = Some("forger".into());
    forged.params = Some(serde_json::json!({"coupon": "STOLEN"}));
    forged
        .request
        .headers
        .insert("x-signature".into(), format!("v1={}", "0".repeat(64)));
    for _ in 0..5 {
        assert_eq!(
            e.decide(&forged, 1_000_000).unwrap().code,
            Code::SignatureInvalid
        );
    }
    let mut check = request("shop", "/home", "192.0.2.250", "ua", true);
    check.user_id = Some("forger".into());
    assert_eq!(e.decide(&check, 1_000_000).unwrap().code, Code::Ok);
}

#[test]
fn state_helpers_fed_garbage_fail_the_rule_not_the_engine() {
    let bodies = [
        ("claim-negative-stock", r#"claim("p", req.user, -1)"#),
        ("claim-empty-pool", r#"claim("", req.user, 5)"#),
        ("distinct-zero-window", r#"distinct("k", "x", 0)"#),
        ("reputation-unknown-kind", r#"reputation("planet", "x")"#),
        ("report-unknown-kind", r#"report("planet", "x", 5)"#),
        ("rate-limit-negative-rate", r#"rate_limit("k", -5, 1)"#),
        ("rate-limit-zero-burst", r#"rate_limit("k", 5, 0)"#),
        ("count-zero-window", r#"count("k", 0)"#),
        (
            "breaker-unknown-setting",
            r#"circuit_open(req, #{ bogus: 1 })"#,
        ),
        (
            "breaker-wrong-type",
            r#"circuit_open(req, #{ error_ratio: "half" })"#,
        ),
    ];
    let sources: Vec<Source> = bodies
        .iter()
        .enumerate()
        .map(|(i, (name, body))| rule(&format!("gateway/{name}.rhai"), name, i as i64, "", body))
        .collect();
    let (e, live) = engine_with(compile(&sources));
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        v.code,
        Code::Ok,
        "fail-open gateway skips every broken rule"
    );
    let rules = live.snapshot().rules();
    assert!(
        rules.iter().all(|r| r.errors == 1),
        "{:?}",
        rules
            .iter()
            .map(|r| (&r.meta.name, r.errors))
            .collect::<Vec<_>>()
    );
    // Fail-closed gateway: the first broken rule answers, naming itself.
    let settings = RuleSettings {
        on_error: [FailPolicy::Allow, FailPolicy::Deny, FailPolicy::Allow],
        ..RuleSettings::default()
    };
    let (e, _) =
        engine_with(RuleSet::compile(&sources, settings, &RuleState::local(1000)).unwrap());
    let v = e
        .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(
        (v.code, v.tier, v.rule.as_deref()),
        (
            Code::RuleDeny,
            Some("gateway"),
            Some("claim-negative-stock")
        )
    );
}

#[test]
fn rules_that_can_never_run_are_reported_as_unreachable() {
    let block_admin = rule(
        "edge/block-admin.rhai",
        "block-admin",
        10,
        "//! routes: /admin/*\n",
        "// every admin request\ndeny(\"no admin from outside\")",
    );
    let admin_audit = rule(
        "edge/admin-audit.rhai",
        "admin-audit",
        20,
        "//! routes: /admin/users\n",
        "if req.ip == \"\" { deny(\"x\") }",
    );
    let api = rule(
        "edge/api.rhai",
        "api-check",
        20,
        "//! routes: /api/*\n",
        "if req.ip == \"\" { deny(\"x\") }",
    );
    let errs = RuleSet::compile(
        &[block_admin.clone(), admin_audit.clone(), api.clone()],
        RuleSettings::default(),
        &RuleState::local(10),
    )
    .unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(
        (errs[0].file.as_str(), errs[0].line),
        ("edge/admin-audit.rhai", 1)
    );
    assert!(errs[0].message.contains("unreachable") && errs[0].message.contains("block-admin"));
    // Conditional outcomes, another tier, or a shadow blocker leave later rules reachable.
    let conditional = rule(
        "edge/block-admin.rhai",
        "block-admin",
        10,
        "//! routes: /admin/*\n",
        "if req.method == \"DELETE\" { deny(\"no\") }",
    );
    let shadow = rule(
        "edge/block-admin.rhai",
        "block-admin",
        10,
        "//! routes: /admin/*\n//! mode: shadow\n",
        "deny(\"no\")",
    );
    let elsewhere = rule(
        "gateway/block-admin.rhai",
        "block-admin",
        10,
        "//! routes: /admin/*\n",
        "deny(\"no\")",
    );
    for first in [conditional, shadow, elsewhere] {
        RuleSet::compile(
            &[first, admin_audit.clone(), api.clone()],
            RuleSettings::default(),
            &RuleState::local(10),
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
    }
}

#[test]
fn a_traced_decision_lists_every_step_and_rule_and_decides_as_the_plain_path() {
    let set = compile(&[
        rule("edge/quiet.rhai", "quiet", 10, "", "()"),
        rule(
            "edge/admin-only.rhai",
            "admin-only",
            20,
            "//! routes: /admin\n",
            "deny(\"admin\")",
        ),
        rule(
            "gateway/score.rhai",
            "scored",
            10,
            "",
            "score(30, \"suspicious\")",
        ),
        rule(
            "business/deny-pay.rhai",
            "deny-pay",
            10,
            "",
            "if req.path == \"/api/pay\" { deny(\"no\") }",
        ),
        rule(
            "business/watch.rhai",
            "watch",
            20,
            "//! mode: shadow\n",
            "deny(\"would\")",
        ),
    ]);
    let (e, _) = engine_with(set);
    let now = 1_000_000;
    // Allowed: every step ran and passed, the score step closes it.
    let r = request("shop", "/api/cart", "198.51.100.1", "ua", true);
    let (v, t) = e.decide_traced(&r, now).unwrap();
    assert_eq!(v.code, Code::Ok);
    let steps: Vec<&str> = t.steps.iter().map(|s| s.step).collect();
    assert_eq!(
        steps,
        [
            "lists",
            "edge",
            "signature",
            "window",
            "nonce",
            "fingerprint",
            "gateway",
            "business",
            "score"
        ]
    );
    assert!(t.steps[..8].iter().all(|s| s.outcome == "pass"));
    assert_eq!(t.steps[8].outcome, "allow");
    let edge: Vec<(&str, &str)> = t.steps[1]
        .rules
        .iter()
        .map(|r| (r.rule.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(
        edge,
        [("quiet", "no match"), ("admin-only", "not for this route")]
    );
    assert_eq!(t.steps[6].rules[0].outcome, "score +30: suspicious");
    let shadow = &t.steps[7].rules[1];
    assert_eq!((shadow.rule.as_str(), shadow.mode), ("watch", "shadow"));
    assert_eq!(shadow.outcome, "deny RULE_DENY: would");
    assert!(t.total_us >= t.steps.iter().map(|s| s.elapsed_us).sum::<f64>() * 0.99);

    // Refused: the deciding step is last and carries the verdict; the plain path agrees.
    let r = request("shop", "/api/pay", "198.51.100.1", "ua", true);
    let (v, t) = e.decide_traced(&r, now).unwrap();
    assert_eq!(
        (v.code, v.rule.as_deref()),
        (Code::RuleDeny, Some("deny-pay"))
    );
    let last = t.steps.last().unwrap();
    assert_eq!(last.step, "business");
    assert_eq!(last.outcome, "deny RULE_DENY: no");
    // The same request again is a replay, decided at the nonce step.
    let (v2, t2) = e.decide_traced(&r, now).unwrap();
    assert_eq!(v2.code, Code::ReplayDuplicate);
    assert_eq!(t2.steps.last().unwrap().step, "nonce");
    let r = request("shop", "/api/pay", "198.51.100.1", "ua", true);
    assert_eq!(e.decide(&r, now).unwrap().code, Code::RuleDeny);

    // The rule tiers alone (backtests, recorded decisions).
    let set = e.rules().snapshot();
    let req = rampart_core::rules::Req::from_request(&r, now);
    let (v, t) = set.judge_traced(&req);
    assert_eq!(v.unwrap().rule.as_deref(), Some("deny-pay"));
    let steps: Vec<&str> = t.steps.iter().map(|s| s.step).collect();
    assert_eq!(steps, ["edge", "gateway", "business"]);
}

/// Rules share a per-thread cache of resolved helper calls (see `RuleSet::run`): it must never
/// carry one set's helpers (and so its lists) into another set, nor one rule's own functions into
/// another rule.
#[test]
fn resolved_calls_never_leak_between_sets_or_between_rules_functions() {
    let listed = |who: &str| {
        compile(&[
            src("lists/vip.txt", &format!("{who}\n")),
            rule(
                "edge/vip.rhai",
                "vip",
                1,
                "",
                "if in_list(\"vip\", req.user) { deny(\"listed\") }",
            ),
        ])
    };
    let (u1, u2, u3) = (listed("u1"), listed("u2"), listed("u3"));
    let (e1, _) = engine_with(u1);
    let (e2, _) = engine_with(u2);
    let (e3, _) = engine_with(u3);
    // Alternate over three sets on one thread, several times each (the cache keeps two).
    for round in 0..4 {
        for (e, denied) in [(&e1, true), (&e2, false), (&e3, false), (&e1, true)] {
            let v = e
                .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
                .unwrap();
            assert_eq!(v.code == Code::RuleDeny, denied, "round {round}: {v:?}");
        }
    }
    // Two rules define a function of the same name: each calls its own.
    let set = compile(&[
        rule(
            "edge/a.rhai",
            "a",
            1,
            "",
            "fn pick(x) { false }\nif pick(1) { deny(\"a\") }",
        ),
        rule(
            "edge/b.rhai",
            "b",
            2,
            "",
            "fn pick(x) { true }\nif pick(1) { deny(\"b\") }",
        ),
    ]);
    let (e, _) = engine_with(set);
    for _ in 0..3 {
        let v = e
            .decide(&request("shop", "/x", "192.0.2.1", "ua", true), 1_000_000)
            .unwrap();
        assert_eq!((v.code, v.rule.as_deref()), (Code::RuleDeny, Some("b")));
    }
}

/// `decide_owned` decides as `decide` does and gives the very request back (moved, not copied:
/// the rules read it in place and keep no handle once the decision is made).
#[test]
fn an_owned_request_is_decided_in_place_and_given_back() {
    // (A business rule: an edge rule answers before the nonce step, so there is no replay to see.)
    let set = compile(&[rule(
        "business/ua.rhai",
        "ua",
        1,
        "",
        "if req.user_agent == \"bad\" || req.header(\"X-Tag\") == \"bad\" { deny(\"ua\") }",
    )]);
    let (e, _) = engine_with(set);
    let now = 1_000_000;
    for (ua, tag, code) in [
        ("good", "", Code::Ok),
        ("bad", "", Code::RuleDeny),
        ("good", "bad", Code::RuleDeny),
    ] {
        let mut r = request("shop", "/x", "192.0.2.1", ua, true);
        if !tag.is_empty() {
            r.request.headers.insert("x-tag".into(), tag.into());
        }
        let (app, body) = (r.app.as_ptr(), r.request.body.as_ref().map(|b| b.as_ptr()));
        let (v, back) = e.decide_owned(r, now);
        assert_eq!(v.unwrap().code, code, "{ua} {tag}");
        assert_eq!(back.app.as_ptr(), app, "the request was copied");
        assert_eq!(back.request.body.as_ref().map(|b| b.as_ptr()), body);
        // Decided again, it is a replay, as with `decide`.
        let (v, _) = e.decide_owned(back, now);
        assert_eq!(v.unwrap().code, Code::ReplayDuplicate);
    }
}

#[test]
fn typos_in_names_are_located_compile_errors() {
    let sources = vec![
        src("lists/bad-methods.txt", "TRACE\n"),
        rule(
            "edge/typo.rhai",
            "typo",
            10,
            "",
            "if req.cleard == \"1\" { deny(\"x\") }",
        ),
        rule(
            "edge/list.rhai",
            "list",
            20,
            "",
            "if in_list(\"bad-methds\", req.method) { deny(\"x\") }",
        ),
        rule(
            "edge/fine.rhai",
            "fine",
            30,
            "",
            "if in_list(\"bad-methods\", req.method) || req.user_agent == \"\" { deny(\"x\") }",
        ),
    ];
    let errs = match RuleSet::compile(&sources, RuleSettings::default(), &RuleState::local(1000)) {
        Ok(_) => panic!("typos compiled"),
        Err(e) => e,
    };
    let found: Vec<(&str, usize, &str)> = errs
        .iter()
        .map(|e| (e.file.as_str(), e.line, e.message.as_str()))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .any(|(f, _, m)| *f == "edge/typo.rhai" && m.contains("no property `cleard`")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(f, _, m)| *f == "edge/list.rhai" && m.contains("\"bad-methds\"")),
        "{found:?}"
    );
}

/// DESIGN §2, "unauthenticated input buys no state": the edge tier runs before the signature, so
/// an edge rule may not count anything keyed by what the client claims. The writing helpers are a
/// located compile error there; only the connection's IP may be counted (`rate_limit_ip`,
/// `count_ip`). A rule that reaches a writing helper indirectly is refused at run time.
#[test]
fn edge_rules_cannot_write_state_keyed_by_claimed_data_before_the_signature() {
    for (helper, call) in [
        ("rate_limit", "rate_limit(\"u:\" + req.user, 10, 5)"),
        ("count", "count(\"u:\" + req.user, 60000)"),
        ("distinct", "distinct(\"u:\" + req.user, req.ip, 60000)"),
        ("claim", "claim(\"pool\", req.user, 10)"),
        ("report", "report(\"user\", req.user, 50)"),
    ] {
        let errs = RuleSet::compile(
            &[rule(
                "edge/writes.rhai",
                "writes",
                1,
                "",
                &format!("let x = 1;\n{call};"),
            )],
            RuleSettings::default(),
            &RuleState::local(1000),
        )
        .expect_err(helper);
        assert!(
            errs.iter().any(|e| e.file == "edge/writes.rhai"
                // Four metadata lines, `let x = 1;`, then the call.
                && e.line == 6
                && e.column == 1 + call.find(helper).unwrap()
                && e.message.contains(helper)
                && e.message.contains("edge")),
            "{helper}: {errs:#?}"
        );
        // The same rule is fine after the signature.
        compile(&[rule(
            "gateway/writes.rhai",
            "writes",
            1,
            "",
            &format!("{call};"),
        )]);
    }

    // A forged flood through an edge rule that reaches `count` indirectly, and one that limits by
    // IP: nothing is keyed by the claimed users, the IP limit works.
    let state = RuleState::local(100_000);
    let set = RuleSet::compile(
        &[
            rule(
                "edge/sneaky.rhai",
                "sneaky",
                1,
                "",
                "let f = Fn(\"count\");\nif f.call(\"u:\" + req.user, 60000) > 3 { deny(\"x\") }",
            ),
            rule(
                "edge/ip-flood.rhai",
                "ip-flood",
                2,
                "",
                "if !rate_limit_ip(req, 5, 5) { deny(\"RATE_LIMITED\", \"too fast\") }\n\
                 else if count_ip(req, 60000) > 1000 { deny(\"x\") }",
            ),
        ],
        RuleSettings::default(),
        &state,
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    let (e, _) = engine_with(set);
    let mut codes = std::collections::HashMap::new();
    for i in 0..200 {
        let mut r = request("shop", "/api/pay", "203.0.113.50", "curl/8", false);
        r.user_id = Some(format!("victim-{i}"));
        let v = e.decide(&r, 1_000_000).unwrap();
        *codes.entry(v.code).or_insert(0) += 1;
    }
    assert_eq!(codes.get(&Code::RateLimited), Some(&195), "{codes:?}");
    assert_eq!(codes.get(&Code::SignatureMissing), Some(&5), "{codes:?}");
    // One GCRA key and one counter, both the IP's; no key for any of the 200 claimed users.
    assert_eq!(state.limiter.len(), 2);
}

/// The subject view lists the rate limits, counters and distinct sets a set keys by a request
/// field, with their figures; a key made any other way is left out.
#[test]
fn a_set_lists_the_state_it_keys_by_a_subject() {
    use rampart_core::rules::Keeps;
    let set = compile(&[
        rule(
            "gateway/ip-rate.rhai",
            "ip-rate",
            10,
            "",
            "if req.ip != \"\" && !rate_limit(\"ip:\" + req.ip, 20, 40) { deny(\"RATE_LIMITED\", \"x\") }",
        ),
        rule(
            "gateway/login.rhai",
            "login",
            20,
            "",
            "if !rate_limit(\"login:\" + req.ip, 0.0833, 5) { deny(\"RATE_LIMITED\", \"x\") }\n\
             if !rate_limit(\"dev:\" + req.device_id, 2, 4) { deny(\"RATE_LIMITED\", \"y\") }",
        ),
        rule(
            "business/velocity.rhai",
            "velocity",
            10,
            "",
            "if count(\"orders:\" + req.user, 600000) > 5 { deny(\"x\") }\n\
             if distinct(\"dev-acct:\" + req.device_id, req.user, 3600000) > 3 { deny(\"y\") }",
        ),
        rule(
            "gateway/computed.rhai",
            "computed",
            30,
            "",
            "let k = \"sku:\" + req.path; if !rate_limit(k, 5, 5) { deny(\"RATE_LIMITED\", \"z\") }\n\
             if !rate_limit(\"u:\" + req.user + \":\" + req.ip, 1, 1) { deny(\"RATE_LIMITED\", \"w\") }\n\
             if count(\"sale:\" + req.path + \":\" + req.user, 1000) > 1 { deny(\"RATE_LIMITED\", \"v\") }",
        ),
    ]);
    let got: Vec<_> = set
        .subject_keys()
        .into_iter()
        .map(|k| (k.rule, k.prefix, k.field, k.keeps))
        .collect();
    let want = |r: &str, p: &str, f: &str, keeps: Keeps| {
        (r.to_string(), p.to_string(), f.to_string(), keeps)
    };
    let rate = |rate_per_sec: f64, burst: u32| Keeps::RateLimit {
        rate_per_sec,
        burst,
    };
    assert_eq!(
        got,
        vec![
            want("ip-rate", "ip:", "ip", rate(20.0, 40)),
            want("login", "login:", "ip", rate(0.0833, 5)),
            want("login", "dev:", "device_id", rate(2.0, 4)),
            want(
                "velocity",
                "orders:",
                "user",
                Keeps::Count { window_ms: 600_000 }
            ),
            want(
                "velocity",
                "dev-acct:",
                "device_id",
                Keeps::Distinct {
                    window_ms: 3_600_000
                }
            ),
        ]
    );
}

/// Planning goes on into the business tier when every gateway rule was planned through, and
/// ends with the first distinct count (the rule needs its answer): handed over, the planned
/// answers are what the rules use, and nothing is counted twice.
#[test]
fn business_distinct_counts_are_planned_after_the_gateway_and_end_the_plan() {
    use rampart_core::rules::Req;
    use rampart_core::store::limits::{Gcra, LimitCall, Planned, PlannedAnswer};
    let state = RuleState::local(10_000);
    let sources = [
        rule("gateway/user.rhai", "user", 10, "", "if !rate_limit(\"user:\" + req.user, 5, 5) { deny(\"RATE_LIMITED\", \"user\") }"),
        rule("business/devices.rhai", "devices", 10, "", "if req.device_id != \"\" && distinct(\"dev:\" + req.device_id, req.user, 60000) > 2 { review(\"many accounts\") }"),
        rule("business/after.rhai", "after", 20, "", "if !rate_limit(\"after:\" + req.user, 1, 1) { deny(\"RATE_LIMITED\", \"after\") }"),
    ];
    let set = RuleSet::compile(&sources, RuleSettings::default(), &state).unwrap();
    let mut d = request("shop", "/x", "192.0.2.9", "ua", true);
    d.client.device_id = Some("dev-1".into());
    let req = Req::from_request(&d, 1_000_000);
    let plan = set.plan_calls(&req);
    assert_eq!(
        plan,
        [
            Planned::RateLimit(LimitCall {
                key: "user:u1".into(),
                rate_per_sec: 5.0,
                burst: 5
            }),
            Planned::Distinct {
                key: "dev:dev-1".into(),
                item: "u1".into(),
                window_ms: 60_000
            },
        ]
    );
    // Without a device id the distinct count is never reached: the business tier is planned
    // through to its last rule.
    let mut bare = request("shop", "/x", "192.0.2.9", "ua", true);
    bare.client.device_id = None;
    let bare_plan = set.plan_calls(&Req::from_request(&bare, 1_000_000));
    assert_eq!(bare_plan.len(), 2, "{bare_plan:?}");
    // Planning counted nothing.
    assert_eq!(
        state
            .distinct
            .count("dev:dev-1", 1_000_000, 60_000)
            .unwrap(),
        0
    );
    // Answers handed over are the rules' answers: a count of 3 makes the rule fire, and the
    // store is not asked.
    let answers = [
        PlannedAnswer::RateLimit(Gcra {
            allowed: true,
            retry_after_ms: 0,
        }),
        PlannedAnswer::Distinct(3),
    ];
    let _guard = rampart_core::rules::prefetched(plan.into_iter().zip(answers));
    let (verdict, errors) = set.judge(&req);
    assert_eq!(errors, 0);
    let v = verdict.expect("the distinct rule fires on the handed-over count");
    assert_eq!(v.rule.as_deref(), Some("devices"), "{v:?}");
    assert_eq!(
        state
            .distinct
            .count("dev:dev-1", 1_000_000, 60_000)
            .unwrap(),
        0
    );
}

/// The gateway's rate limits planned ahead of the rules (for a shared store to spend them in
/// the anti-replay step's round trip): the calls the tier will make, in order, for as long as
/// each allows — rules for other routes and rules whose other conditions are false skipped,
/// the plan ending at the first rule it cannot follow (here a counter) — and nothing spent.
#[test]
fn the_gateway_tiers_rate_limits_are_planned_in_order_and_nothing_is_spent() {
    use rampart_core::rules::Req;
    let state = RuleState::local(10_000);
    let gate = |name: &str, prio: i64, meta: &str, body: &str| {
        rule(&format!("gateway/{name}.rhai"), name, prio, meta, body)
    };
    let sources = [
        gate("ip", 10, "", "if req.ip != \"\" && !rate_limit(\"ip:\" + req.ip, 10, 3) { deny(\"RATE_LIMITED\", \"ip\") }"),
        gate("sale", 20, "//! routes: /api/sale\n", "if req.method == \"POST\" && !rate_limit(\"sale:\" + req.path, 500.5, 200) { deny(\"RATE_LIMITED\", \"sale\") }"),
        gate("user", 30, "", "if !rate_limit(\"user:\" + req.user, 0.5, 2) { deny(\"RATE_LIMITED\", \"user\") }"),
        gate("orders", 40, "", "if count(\"orders:\" + req.user, 60000) > 5 { deny(\"orders\") }"),
        gate("late", 50, "", "if !rate_limit(\"late:\" + req.ip, 1, 1) { deny(\"RATE_LIMITED\", \"late\") }"),
    ];
    let set = RuleSet::compile(&sources, RuleSettings::default(), &state).unwrap();
    let plan = |path: &str, ip: &str| -> Vec<(String, f64, u32)> {
        let mut d = request("shop", path, ip, "ua", true);
        if ip.is_empty() {
            d.client.ip = None;
        }
        set.plan_calls(&Req::from_request(&d, 1_000_000))
            .into_iter()
            .map(|c| match c {
                rampart_core::store::limits::Planned::RateLimit(c) => {
                    (c.key, c.rate_per_sec, c.burst)
                }
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(
        plan("/x", "192.0.2.9"),
        [("ip:192.0.2.9".into(), 10.0, 3), ("user:u1".into(), 0.5, 2)]
    );
    assert_eq!(
        plan("/api/sale", "192.0.2.9"),
        [
            ("ip:192.0.2.9".into(), 10.0, 3),
            ("sale:/api/sale".into(), 500.5, 200),
            ("user:u1".into(), 0.5, 2)
        ]
    );
    assert_eq!(plan("/x", ""), [("user:u1".into(), 0.5, 2)]);
    // Planning spent nothing; the rules spend when they run.
    assert_eq!(
        state.limiter.gcra_tat("ip:192.0.2.9", 1_000_000).unwrap(),
        None
    );
    let (e, _) = engine_with(set);
    let v = e
        .decide(&request("shop", "/x", "192.0.2.9", "ua", true), 1_000_000)
        .unwrap();
    assert_eq!(v.code, Code::Ok, "{v:?}");
    assert!(state
        .limiter
        .gcra_tat("ip:192.0.2.9", 1_000_000)
        .unwrap()
        .is_some());
}
