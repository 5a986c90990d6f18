//! `validate` (compile and lint a rule directory) and `test` (its samples, held to the ratchet;
//! `--only` explains single samples).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use rampart_core::lifecycle::regress::{Runner, Sample};
use rampart_core::rules::{RuleError, Source};
use serde_json::json;

use crate::{
    compile, load_samples, located, pretty, ratchet, read_sources, run_samples, runner,
    samples_dir, Fail, Out, RulesArg,
};

/// Lint warnings: things that compile but are probably mistakes.
fn lint(sources: &[Source]) -> Vec<RuleError> {
    let scripts: Vec<&str> = sources
        .iter()
        .filter(|s| s.path.ends_with(".rhai"))
        .map(|s| s.text.as_str())
        .collect();
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.path.starts_with("lists/")) {
        let Some(name) = s
            .path
            .trim_start_matches("lists/")
            .rsplit_once('.')
            .map(|(n, _)| n)
        else {
            continue;
        };
        let quoted = format!("\"{name}\"");
        if !scripts.iter().any(|t| t.contains(&quoted)) {
            out.push(RuleError {
                file: s.path.clone(),
                line: 1,
                column: 1,
                message: format!("warning: list {name:?} is not used by any rule"),
            });
        }
    }
    for s in sources.iter().filter(|s| s.path.ends_with(".rhai")) {
        if s.text.trim().is_empty() {
            out.push(RuleError {
                file: s.path.clone(),
                line: 1,
                column: 1,
                message: "warning: empty rule file".into(),
            });
        }
    }
    out
}

pub(crate) fn validate(a: &RulesArg, deny_warnings: bool) -> Out {
    let sources = read_sources(&a.rules)?;
    let warnings = lint(&sources);
    let result = compile(&sources);
    let ok = result.is_ok() && (warnings.is_empty() || !deny_warnings);
    let text = if a.json {
        pretty(&match &result {
            Ok(set) => json!({
                "ok": ok, "version": set.version(), "files": sources.len(),
                "rules": set.rule_count(), "errors": [], "warnings": warnings,
            }),
            Err(errs) => json!({ "ok": false, "errors": errs, "warnings": warnings }),
        })
    } else {
        let mut o = String::new();
        match &result {
            Ok(set) => {
                let _ = writeln!(
                    o,
                    "{}: {} rules in {} files, version {}: valid",
                    a.rules.display(),
                    set.rule_count(),
                    sources.len(),
                    set.version()
                );
            }
            Err(errs) => {
                o.push_str(&located(errs));
                let _ = writeln!(o, "{}: {} problem(s)", a.rules.display(), errs.len());
            }
        }
        o.push_str(&located(&warnings));
        o
    };
    if ok {
        Ok(text)
    } else {
        Err(Fail::Check(text))
    }
}

/// Shell-quotes one argument for a reproduction command.
fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn expected(e: &rampart_core::lifecycle::regress::Expect) -> String {
    format!(
        "{}{}{}",
        e.action.as_str(),
        e.code
            .as_deref()
            .map(|c| format!(" {c}"))
            .unwrap_or_default(),
        e.rule
            .as_deref()
            .map(|r| format!(" rule {r}"))
            .unwrap_or_default()
    )
}

pub(crate) fn test(
    a: &RulesArg,
    samples: Option<PathBuf>,
    ratchet_path: Option<PathBuf>,
    update: bool,
    only: &[String],
) -> Out {
    let sdir = samples_dir(a, samples);
    let rpath = ratchet_path.unwrap_or_else(|| sdir.join("ratchet.txt"));
    let runner = runner(read_sources(&a.rules)?)?;
    let mut all = load_samples(&sdir)?;
    if !only.is_empty() {
        all.retain(|s| only.contains(&s.name));
        if all.len() != only.len() {
            let missing: Vec<&str> = only
                .iter()
                .filter(|n| !all.iter().any(|s| &s.name == *n))
                .map(String::as_str)
                .collect();
            return Err(Fail::Run(format!(
                "no sample named {} in {}",
                missing.join(", "),
                sdir.display()
            )));
        }
        return explain(&runner, &all, a.json);
    }
    let report = run_samples(&runner, &all, "samples", a.json);
    let names: BTreeSet<String> = all.iter().map(|s| s.name.clone()).collect();
    let passing: BTreeSet<String> = report
        .results
        .iter()
        .filter(|r| r.passed)
        .map(|r| r.name.clone())
        .collect();
    let stored = ratchet::load(&rpath)?;
    let verdict = ratchet::judge(
        stored.as_ref().unwrap_or(&BTreeSet::new()),
        &passing,
        &names,
    );
    if update {
        ratchet::store(&rpath, &passing)?;
    }
    let failed = !update && !verdict.regressed.is_empty();
    let repro = |name: &str| {
        format!(
            "rampart-rules test --rules {} --samples {} --only {}",
            sh(&a.rules.display().to_string()),
            sh(&sdir.display().to_string()),
            sh(name)
        )
    };
    let text = if a.json {
        pretty(&json!({
            "ok": !failed,
            "version": report.ruleset_version,
            "samples": all.len(),
            "passed": passing.len(),
            "detection": report.detection(),
            "false_positives": report.false_positives(),
            "ratchet": { "file": rpath, "present": stored.is_some(), "updated": update },
            "regressed": verdict.regressed.iter().map(|n| {
                let r = report.results.iter().find(|r| &r.name == n);
                json!({ "name": n, "expected": r.map(|r| &r.expect), "got": r.map(|r| &r.got), "reproduce": repro(n) })
            }).collect::<Vec<_>>(),
            "newly_passing": verdict.newly_passing,
            "missing": verdict.missing,
            "failing_not_in_ratchet": report.failures().filter(|r| !verdict.regressed.contains(&r.name)).map(|r| &r.name).collect::<Vec<_>>(),
        }))
    } else {
        let mut o = String::new();
        let d = report.detection();
        let f = report.false_positives();
        let _ = writeln!(
            o,
            "rule set {} (version {}): {}/{} samples pass; detection {}/{}, false positives {}/{}",
            a.rules.display(),
            report.ruleset_version,
            passing.len(),
            all.len(),
            d.hits,
            d.total,
            f.hits,
            f.total
        );
        if stored.is_none() && !update {
            let _ = writeln!(
                o,
                "no ratchet at {} yet: create it with --update-ratchet and commit it",
                rpath.display()
            );
        }
        for n in &verdict.regressed {
            if let Some(r) = report.results.iter().find(|r| &r.name == n) {
                let _ = writeln!(
                    o,
                    "REGRESSED {n}: expected {}, got {}\n  reproduce: {}",
                    expected(&r.expect),
                    r.got.summary(),
                    repro(n)
                );
            }
        }
        let known: Vec<_> = report
            .failures()
            .filter(|r| !verdict.regressed.contains(&r.name))
            .collect();
        if !known.is_empty() {
            let _ = writeln!(
                o,
                "{} sample(s) fail but are not in the ratchet (not passing before either):",
                known.len()
            );
            for r in known.iter().take(20) {
                let _ = writeln!(
                    o,
                    "  {}: expected {}, got {}",
                    r.name,
                    expected(&r.expect),
                    r.got.summary()
                );
            }
        }
        if !verdict.missing.is_empty() {
            let _ = writeln!(
                o,
                "{} ratchet name(s) match no sample (renamed or removed): {}",
                verdict.missing.len(),
                verdict.missing.join(", ")
            );
        }
        if update {
            let _ = writeln!(
                o,
                "ratchet {} rewritten: {} samples ({} added, {} removed)",
                rpath.display(),
                passing.len(),
                verdict.newly_passing.len(),
                verdict.regressed.len() + verdict.missing.len()
            );
        } else if !verdict.newly_passing.is_empty() && stored.is_some() {
            let _ = writeln!(
                o,
                "{} sample(s) pass and are not in the ratchet yet: lock them in with --update-ratchet",
                verdict.newly_passing.len()
            );
        }
        if failed {
            let _ = writeln!(
                o,
                "FAILED: {} sample(s) in the ratchet no longer pass",
                verdict.regressed.len()
            );
        }
        o
    };
    if failed {
        Err(Fail::Check(text))
    } else {
        Ok(text)
    }
}

/// `test --only`: each sample's request, expectation and full outcome.
fn explain(runner: &Runner, samples: &[Sample], json: bool) -> Out {
    let results: Vec<_> = samples.iter().map(|s| runner.run_one(s)).collect();
    let ok = results.iter().all(|r| r.passed);
    let text = if json {
        pretty(&json!({ "ok": ok, "results": results }))
    } else {
        let mut o = String::new();
        for (s, r) in samples.iter().zip(&results) {
            let _ = writeln!(
                o,
                "{} ({:?}, {}): {}\n  {}",
                s.name,
                s.kind,
                s.category,
                if r.passed { "passes" } else { "FAILS" },
                s.description
            );
            let _ = writeln!(
                o,
                "  request: {} {}{} app={} user={}",
                s.request.request.method,
                s.request.request.path,
                if s.request.request.query.is_empty() {
                    String::new()
                } else {
                    format!("?{}", s.request.request.query)
                },
                s.request.app,
                s.request.user_id.as_deref().unwrap_or("-")
            );
            if !s.before.is_empty() || s.repeat > 1 {
                let _ = writeln!(
                    o,
                    "  history: {} request(s) before, sent {} time(s){}",
                    s.before.len(),
                    s.repeat,
                    if s.replay { " (replayed)" } else { "" }
                );
            }
            let _ = writeln!(o, "  expected: {}", expected(&s.expect));
            let _ = writeln!(o, "  got:      {}", r.got.summary());
            if let Some(reason) = &r.got.reason {
                let _ = writeln!(o, "  reason:   {reason}");
            }
            for sh in &r.got.shadow {
                let _ = writeln!(o, "  shadow:   {sh}");
            }
        }
        o
    };
    if ok {
        Ok(text)
    } else {
        Err(Fail::Check(text))
    }
}
