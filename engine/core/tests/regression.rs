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
