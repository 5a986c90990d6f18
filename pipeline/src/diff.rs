//! `diff`: what a changed rule set decides differently from a base (a directory or a git ref),
//! over the samples and over recorded traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rampart_core::lifecycle::backtest;
use rampart_core::rules::Source;
use serde_json::json;

use crate::{
    compile, git, load_samples, located, pretty, read_sources, run_samples, runner, samples_dir,
    Fail, Out, RulesArg,
};

/// The base rule set: a directory, or the rule directory at a git ref.
fn base_sources(rules: &Path, base: &str) -> Result<(Vec<Source>, String), String> {
    let p = Path::new(base);
    if p.is_dir() {
        return Ok((read_sources(p)?, p.display().to_string()));
    }
    Ok((git::sources_at(rules, base)?, format!("git {base}")))
}

pub(crate) fn diff(
    a: &RulesArg,
    base: &str,
    samples: Option<PathBuf>,
    traffic: Option<PathBuf>,
    examples: usize,
    fail_on_change: bool,
) -> Out {
    let head_sources = read_sources(&a.rules)?;
    let (base_sources, base_label) = base_sources(&a.rules, base)?;
    let head = runner(head_sources.clone())?;
    let base_runner = runner(base_sources.clone()).map_err(|f| match f {
        Fail::Check(t) => Fail::Run(format!("the base ({base_label}) does not compile:\n{t}")),
        other => other,
    })?;
    let sdir = samples_dir(a, samples);
    let sample_changes = if sdir.as_os_str() == "none" {
        None
    } else {
        let all = load_samples(&sdir)?;
        let before = run_samples(&base_runner, &all, "base samples", a.json);
        let after = run_samples(&head, &all, "head samples", a.json);
        Some((before, after))
    };
    let traffic_report = match &traffic {
        Some(path) => {
            let rows = rampart_files::read_traffic(path)?;
            // Each side in a world of its own: fresh counters, limits and claims.
            let b = compile(&base_sources).map_err(|e| Fail::Run(located(&e)))?;
            let h = compile(&head_sources).map_err(|e| Fail::Run(located(&e)))?;
            Some(backtest::compare(&b, &h, &rows, examples))
        }
        None => None,
    };
    let sample_list = sample_changes
        .as_ref()
        .map(|(b, h)| b.changes(h))
        .unwrap_or_default();
    let changed = sample_list.len() as u64 + traffic_report.as_ref().map_or(0, |r| r.changed);
    let text = if a.json {
        pretty(&json!({
            "base": { "label": base_label, "version": base_runner.version() },
            "head": { "dir": a.rules, "version": head.version() },
            "files": file_changes(&base_sources, &head_sources),
            "samples": sample_changes.as_ref().map(|(b, h)| json!({
                "total": h.results.len(),
                "passed": { "base": b.passed(), "head": h.passed() },
                "detection": { "base": b.detection(), "head": h.detection() },
                "false_positives": { "base": b.false_positives(), "head": h.false_positives() },
                "changes": sample_list,
            })),
            "traffic": traffic_report,
            "changed": changed,
        }))
    } else {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{} (version {}) against {base_label} (version {})",
            a.rules.display(),
            head.version(),
            base_runner.version()
        );
        let files = file_changes(&base_sources, &head_sources);
        let _ = writeln!(o, "files: {} changed", files.len());
        for (path, what) in &files {
            let _ = writeln!(o, "  {what:<8} {path}");
        }
        if let Some((b, h)) = &sample_changes {
            let _ = writeln!(
                o,
                "samples: {} of {} change decision; passing {} → {}, detection {}/{} → {}/{}, false positives {}/{} → {}/{}",
                sample_list.len(),
                h.results.len(),
                b.passed(),
                h.passed(),
                b.detection().hits,
                b.detection().total,
                h.detection().hits,
                h.detection().total,
                b.false_positives().hits,
                b.false_positives().total,
                h.false_positives().hits,
                h.false_positives().total
            );
            for c in sample_list.iter().take(examples) {
                let _ = writeln!(
                    o,
                    "  {}: {} → {}",
                    c.name,
                    c.before.summary(),
                    c.after.summary()
                );
            }
        }
        if let Some(r) = &traffic_report {
            let _ = writeln!(
                o,
                "traffic: {} decisions, {} replayed ({} stopped before the rules, {} without a request): {} change",
                r.rows, r.replayed, r.not_rules, r.unrecorded, r.changed
            );
            for (k, n) in &r.by_action {
                let _ = writeln!(o, "  {k}: {n}");
            }
            for (rule, c) in &r.by_rule {
                let _ = writeln!(o, "  {rule}: +{} −{}", c.gains, c.losses);
            }
            for e in &r.examples {
                let _ = writeln!(
                    o,
                    "  {} {}: {} → {}",
                    e.decision_id, e.route, e.before, e.after
                );
            }
        }
        o
    };
    if fail_on_change && changed > 0 {
        Err(Fail::Check(text))
    } else {
        Ok(text)
    }
}

/// Files added, removed or modified between two sets.
fn file_changes(base: &[Source], head: &[Source]) -> BTreeMap<String, &'static str> {
    let b: BTreeMap<&str, &str> = base
        .iter()
        .map(|s| (s.path.as_str(), s.text.as_str()))
        .collect();
    let h: BTreeMap<&str, &str> = head
        .iter()
        .map(|s| (s.path.as_str(), s.text.as_str()))
        .collect();
    let mut out = BTreeMap::new();
    for (p, t) in &h {
        match b.get(p) {
            None => {
                out.insert(p.to_string(), "added");
            }
            Some(old) if old != t => {
                out.insert(p.to_string(), "modified");
            }
            _ => {}
        }
    }
    for p in b.keys().filter(|p| !h.contains_key(*p)) {
        out.insert(p.to_string(), "removed");
    }
    out
}
