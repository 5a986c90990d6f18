//! The default rule set (`rules/`) against its recorded samples (`rules/samples/`), through the
//! regression runner the server and the pipeline use.

use std::path::{Path, PathBuf};

use rampart_core::lifecycle::regress::{Kind, Runner, Sample};
use rampart_core::model::Action;
use rampart_core::rules::{RuleSettings, Source};

fn root() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../rules")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn default_rules() -> Vec<Source> {
    let root = root();
    let mut paths = Vec::new();
    for tier in ["edge", "gateway", "business", "lists"] {
        files(&root.join(tier), &mut paths);
    }
    paths
        .into_iter()
        .map(|p| Source {
            path: p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&p).unwrap(),
        })
        .collect()
}

fn samples() -> Vec<Sample> {
    let mut paths = Vec::new();
    files(&root().join("samples"), &mut paths);
    paths.sort();
    paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            Sample::parse(
                &p.display().to_string(),
                &std::fs::read_to_string(p).unwrap(),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

#[test]
fn the_default_rules_meet_the_detection_and_false_positive_aims_on_the_samples() {
    let samples = samples();
    let attacks = samples.iter().filter(|s| s.kind == Kind::Attack).count();
    let benign = samples.iter().filter(|s| s.kind == Kind::Benign).count();
    assert!(
        attacks >= 300 && benign >= 300,
        "{attacks} attack, {benign} benign samples"
    );
    let runner = Runner::new(default_rules(), RuleSettings::default()).expect("rules compile");
    assert!(
        default_rules()
            .iter()
            .filter(|s| s.path.ends_with(".rhai"))
            .count()
            >= 20
    );
    let report = runner.run(&samples);
    let d = report.detection();
    let f = report.false_positives();
    assert!(d.ratio() >= 0.95, "detection {d:?}");
    assert!(f.ratio() <= 0.01, "false positives {f:?}");
    // Every hand-written scenario (replays, floods, coupon and lottery abuse…) gets exactly the
    // decision it expects: action, code, tier and rule.
    let failed: Vec<String> = report
        .failures()
        .filter(|r| r.name.starts_with("scenario-"))
        .map(|r| format!("{}: got {}", r.name, r.got.summary()))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    // All three tiers and the anti-replay steps take part.
    for prefix in ["edge/", "gateway/", "business/", "replay/nonce", "shadow:"] {
        assert!(
            report.rule_hits.keys().any(|k| k.starts_with(prefix)),
            "no hits for {prefix}: {:?}",
            report.rule_hits
        );
    }
}

#[test]
fn runs_are_deterministic_and_changes_between_sets_are_reported() {
    let samples = samples();
    let base = Runner::new(default_rules(), RuleSettings::default()).unwrap();
    let a = base.run(&samples);
    let b = base.run(&samples);
    assert!(a.changes(&b).is_empty(), "two runs of one set differ");
    // Without the SQL injection rule, exactly SQL injection attacks change, all to allow.
    let without: Vec<Source> = default_rules()
        .into_iter()
        .filter(|s| s.path != "edge/waf-sqli.rhai")
        .collect();
    let c = Runner::new(without, RuleSettings::default())
        .unwrap()
        .run(&samples);
    let changes = a.changes(&c);
    assert!(changes.len() > 20, "{}", changes.len());
    for ch in &changes {
        assert_eq!(ch.kind, Kind::Attack, "{}", ch.name);
        assert_eq!(ch.before.rule.as_deref(), Some("waf-sqli"), "{}", ch.name);
    }
    assert!(changes.iter().any(|c| c.after.action == Action::Allow));
}

#[test]
fn the_shadow_rule_never_changes_a_decision() {
    let samples = samples();
    let with = Runner::new(default_rules(), RuleSettings::default())
        .unwrap()
        .run(&samples);
    let without: Vec<Source> = default_rules()
        .into_iter()
        .filter(|s| !s.text.contains("//! mode: shadow"))
        .collect();
    let plain = Runner::new(without, RuleSettings::default())
        .unwrap()
        .run(&samples);
    assert!(with.changes(&plain).is_empty());
    assert!(with.rule_hits.keys().any(|k| k.starts_with("shadow:")));
}

#[test]
fn bad_sample_files_are_reported_not_panicked_on() {
    for text in ["", "{}", "{\"name\":\"x\",\"kind\":\"attack\",\"request\":{\"app\":\"shop\"},\"expect\":{\"action\":\"explode\"}}",
        "{\"name\":\"x\",\"kind\":\"attack\",\"request\":{\"app\":\"shop\"},\"expect\":{\"action\":\"deny\"},\"repeat\":0}"] {
        assert!(Sample::parse("bad.json", text).is_err(), "{text}");
    }
    assert!(Sample::from_crs("not json").is_err());
}

/// Debian's OWASP CRS (the package the test command installs), as `[waf]` loads it by default:
/// every `.conf` file, paranoia 2, threshold 5, Rampart's default files left out and exclusions.
fn debian_crs() -> Option<rampart_core::waf::crs::SharedCrs> {
    use rampart_core::waf::crs::{Crs, CrsOptions};
    let dir = Path::new("/usr/share/modsecurity-crs/rules");
    if !dir.is_dir() {
        eprintln!(
            "skipped: no CRS rules in {} (scripts/test.sh installs modsecurity-crs)",
            dir.display()
        );
        return None;
    }
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            (n.starts_with("REQUEST-") && n.ends_with(".conf"))
                .then(|| (n, std::fs::read_to_string(e.path()).unwrap()))
        })
        .collect();
    files.sort();
    let data = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string());
    Some(std::sync::Arc::new(
        Crs::build(&files, &[], &data, CrsOptions::default()).expect("Debian's CRS compiles"),
    ))
}

/// With the CRS in the edge tier, the browsers, crawlers and apps people use are never refused,
/// and the recorded benign traffic stays under the 1% false-positive aim.
#[test]
fn with_the_crs_popular_user_agents_pass_and_benign_samples_stay_under_one_percent() {
    let Some(crs) = debian_crs() else { return };
    let runner = Runner::new(default_rules(), RuleSettings::default())
        .expect("rules compile")
        .with_crs(Some(crs));
    let agents = std::fs::read_to_string(root().join("samples/benign/user-agents.txt")).unwrap();
    let uas: Vec<Sample> = agents
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .enumerate()
        .map(|(i, ua)| {
            let line = serde_json::json!({
                "id": format!("ua-{i}"), "label": "benign", "method": "GET",
                "uri": "/products?q=running+shoes&page=2",
                "headers": {
                    "Host": "shop.example", "User-Agent": ua, "Accept": "text/html,*/*;q=0.8",
                    "Accept-Language": "en-GB,en;q=0.9", "Accept-Encoding": "gzip, deflate, br"
                }
            });
            Sample::from_crs(&line.to_string()).unwrap()
        })
        .collect();
    assert!(uas.len() >= 500, "{} user agents", uas.len());
    let report = runner.run(&uas);
    let flagged: Vec<String> = report
        .failures()
        .map(|r| format!("{}: {}", r.name, r.got.summary()))
        .collect();
    assert!(
        flagged.is_empty(),
        "popular user agents refused: {flagged:#?}"
    );

    let samples: Vec<Sample> = samples()
        .into_iter()
        .filter(|s| s.kind == Kind::Benign)
        .collect();
    let f = runner.run(&samples).false_positives();
    assert!(f.ratio() <= 0.01, "false positives with the CRS {f:?}");
}
