//! The CRS in the rule tiers: `crs(req)` judges with the set the state holds, once per request,
//! through the pre-check and the interpreter alike; files are chosen, set up and excluded as
//! documented.

use std::sync::Arc;

use rampart_core::model::{Action, DecideRequest};
use rampart_core::rules::{Req, RuleSet, RuleSettings, RuleState, Source};
use rampart_core::waf::crs::{Crs, CrsOptions};

/// A miniature CRS in the real one's shape: initialisation, a paranoia gate, two detection
/// rules (one at paranoia level 2) and the blocking evaluation.
fn files() -> Vec<(String, String)> {
    vec![
        (
            "REQUEST-901-INITIALIZATION.conf".into(),
            r#"
SecComponentSignature "OWASP_CRS/9.9.9-test"
SecRule &TX:crs_setup_version "@eq 0" "id:901001,phase:1,deny,status:500,severity:'CRITICAL'"
SecRule &TX:inbound_anomaly_score_threshold "@eq 0" "id:901100,phase:1,pass,nolog,setvar:'tx.inbound_anomaly_score_threshold=5'"
SecAction "id:901200,phase:1,pass,nolog,setvar:'tx.anomaly_score=0',setvar:'tx.anomaly_score_pl1=0',setvar:'tx.anomaly_score_pl2=0'"
"#
            .into(),
        ),
        (
            "REQUEST-920-PROTOCOL-ENFORCEMENT.conf".into(),
            r#"SecRule &REQUEST_HEADERS:Accept "@eq 0" "id:920300,phase:1,pass,severity:'CRITICAL',setvar:'tx.anomaly_score_pl1=+5'""#.into(),
        ),
        (
            "REQUEST-942-APPLICATION-ATTACK-SQLI.conf".into(),
            r#"
SecRule TX:EXECUTING_PARANOIA_LEVEL "@lt 1" "id:942011,phase:2,pass,nolog,skipAfter:END-942"
SecRule ARGS "@rx (?i)\bunion\b.{1,40}\bselect\b" "id:942100,phase:2,block,t:none,t:urlDecodeUni,severity:'CRITICAL',tag:'paranoia-level/1',setvar:'tx.anomaly_score_pl1=+5'"
SecRule TX:EXECUTING_PARANOIA_LEVEL "@lt 2" "id:942013,phase:2,pass,nolog,skipAfter:END-942"
SecRule ARGS "@rx ['`]" "id:942432,phase:2,block,severity:'CRITICAL',tag:'paranoia-level/2',setvar:'tx.anomaly_score_pl2=+5'"
SecMarker "END-942"
"#
            .into(),
        ),
        (
            "REQUEST-949-BLOCKING-EVALUATION.conf".into(),
            r#"
SecAction "id:949060,phase:2,pass,nolog,setvar:'tx.anomaly_score=+%{tx.anomaly_score_pl1}'"
SecRule TX:EXECUTING_PARANOIA_LEVEL "@ge 2" "id:949061,phase:2,pass,nolog,setvar:'tx.anomaly_score=+%{tx.anomaly_score_pl2}'"
SecRule TX:ANOMALY_SCORE "@ge %{tx.inbound_anomaly_score_threshold}" "id:949110,phase:2,deny,severity:'CRITICAL'"
"#
            .into(),
        ),
        ("README.md".into(), "not a rule file".into()),
    ]
}

fn crs(paranoia: u8, after: &[(String, String)]) -> Arc<Crs> {
    let options = CrsOptions {
        paranoia,
        default_exclusions: false,
        ..CrsOptions::default()
    };
    Arc::new(
        Crs::build(
            &files(),
            after,
            &|f| Err(format!("{f}: no data files")),
            options,
        )
        .unwrap(),
    )
}

fn request(query: &str) -> DecideRequest {
    let mut r = DecideRequest {
        app: "shop".into(),
        ..Default::default()
    };
    r.request.method = "GET".into();
    r.request.path = "/search".into();
    r.request.query = query.into();
    r
}

const RULE: &str = "//! name: waf-crs\n//! priority: 36\n//! owner: test\n//! description: test\nlet a = crs(req);\nif a != \"\" { deny(\"crs \" + a + \" (\" + crs_rules(req) + \")\") }\n";

fn judge(c: Option<Arc<Crs>>, query: &str) -> (Action, Option<String>) {
    let state = RuleState::local(100).with_crs(c);
    let set = RuleSet::compile(
        &[Source {
            path: "edge/waf-crs.rhai".into(),
            text: RULE.into(),
        }],
        RuleSettings::default(),
        &state,
    )
    .unwrap();
    match set.judge(&Req::from_request(&request(query), 0)).0 {
        Some(v) => (v.action, v.reasons.first().map(|r| r.message.clone())),
        None => (Action::Allow, None),
    }
}

#[test]
fn crs_refuses_at_the_threshold_and_names_the_family_and_rules() {
    let c = crs(1, &[]);
    let (action, reason) = judge(Some(c.clone()), "q=1+union+all+select+password");
    assert_eq!(action, Action::Deny);
    assert_eq!(reason.as_deref(), Some("crs sqli (942100)"));
    assert_eq!(judge(Some(c), "q=shoes").0, Action::Allow);
    // Without a CRS the helper finds nothing.
    assert_eq!(
        judge(None, "q=1+union+all+select+password").0,
        Action::Allow
    );
}

#[test]
fn paranoia_level_and_skipped_files_are_honoured() {
    // PL2 rules run only at paranoia 2.
    assert_eq!(judge(Some(crs(1, &[])), "q=O'Brien").0, Action::Allow);
    assert_eq!(judge(Some(crs(2, &[])), "q=O'Brien").0, Action::Deny);
    // 920 (protocol conformance) is left out by default: no Accept header is no attack.
    let c = crs(1, &[]);
    assert!(!c.files.iter().any(|f| f.contains("-920-")));
    assert!(c.files.iter().all(|f| f != "README.md"));
    assert_eq!(c.version, "OWASP_CRS/9.9.9-test");
    // The configuration-only rules were folded at load.
    assert!(c.rule_counts().1 > 0);
}

#[test]
fn operator_exclusions_apply_after_the_set() {
    let after = vec![(
        "mine.conf".to_string(),
        "SecRuleRemoveById 942432\n".to_string(),
    )];
    assert_eq!(judge(Some(crs(2, &after)), "q=O'Brien").0, Action::Allow);
    let after = vec![(
        "mine.conf".to_string(),
        "SecRuleUpdateTargetById 942100 \"!ARGS:q\"\n".to_string(),
    )];
    let c = crs(1, &after);
    assert_eq!(
        judge(Some(c.clone()), "q=1+union+select+2").0,
        Action::Allow
    );
    assert_eq!(judge(Some(c), "id=1+union+select+2").0, Action::Deny);
}

#[test]
fn broken_rule_files_are_located_errors() {
    let mut f = files();
    f.push((
        "REQUEST-999-BROKEN.conf".into(),
        "SecRule ARGS \"@nosuchop x\" \"id:1,phase:2\"\n".into(),
    ));
    let errs = Crs::build(&f, &[], &|_| Err(String::new()), CrsOptions::default()).unwrap_err();
    assert_eq!(errs[0].file, "REQUEST-999-BROKEN.conf");
    assert_eq!(errs[0].line, 1);
}

#[test]
fn the_verdict_is_judged_once_per_request() {
    let c = crs(1, &[]);
    let req = Req::from_request(&request("q=1+union+select+2"), 0);
    let first = req.crs(Some(&c)).clone();
    // A second ask is the cached verdict, even without the set.
    assert_eq!(req.crs(None), &first);
    assert!(first.blocked && first.rules == vec![942100]);
}

/// Well-formed anti-replay headers (a timestamp, a nonce, signature entries, a body hash, a key
/// id) are Rampart's protocol, fresh on every request: the CRS is not handed them. A value in any
/// other form is the client's text and is judged, as is any other header holding the same text.
#[test]
fn well_formed_anti_replay_headers_are_not_scanned_and_malformed_ones_are() {
    let after = vec![(
        "mine.conf".to_string(),
        r#"SecRule REQUEST_HEADERS "@rx (?i)union.{0,3}select|deadbeef" "id:942190,phase:2,deny,severity:'CRITICAL'""#
            .to_string(),
    )];
    let c = crs(1, &after);
    let with = |name: &str, value: &str| {
        let mut r = request("q=shoes");
        r.request.headers.insert(name.into(), value.into());
        c.judge(&r)
    };
    let hex = format!("v1={}", "deadbeef".repeat(8));
    for (name, value) in [
        ("x-signature", hex.as_str()),
        ("X-Signature", &format!("{hex}, {hex}")),
        ("x-nonce", "union_select_0123456789"),
        ("x-content-sha256", &"deadbeef".repeat(8)),
        ("x-key-id", "deadbeef-2026"),
        ("x-timestamp", "1765000000000"),
    ] {
        let v = with(name, value);
        assert!(!v.blocked && v.rules.is_empty(), "{name}: {value} {v:?}");
    }
    for (name, value) in [
        ("x-nonce", "1 union select password"),
        ("x-signature", "v1=deadbeef"),
        ("x-signature", &format!("{hex},{hex},{hex},{hex},{hex}")),
        ("x-timestamp", "1765000000000 union select 1"),
        ("x-key-id", "deadbeef key"),
        ("x-other", hex.as_str()),
    ] {
        let v = with(name, value);
        assert!(v.blocked && v.rules == [942190], "{name}: {value} {v:?}");
    }
}
