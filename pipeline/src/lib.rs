//! `rampart-rules`: the rule pipeline for CI. It validates, tests, diffs, bundles, signs and
//! promotes rule sets with the engine core's own compiler and regression runner
//! (`rampart_core::rules`, `rampart_core::lifecycle::regress`, `rampart_core::lifecycle::backtest`,
//! `rampart_core::lifecycle::bundle`), so a set that passes here cannot fail at upload for another reason.
//!
//! Exit codes: 0 success, 1 the check failed (invalid rules, a ratchet regression, a refused
//! bundle or promotion), 2 the command could not run (bad arguments, unreadable files, no
//! connection).

mod git;
mod ratchet;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rampart_core::lifecycle::backtest;
use rampart_core::lifecycle::bundle::{Bundle, PublicKey, SecretKey};
use rampart_core::lifecycle::regress::{Report, Runner, Sample};
use rampart_core::rules::{RuleError, RuleSet, RuleSettings, RuleState, Source};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "rampart-rules",
    version,
    about = "Validate, test, diff, sign and promote Rampart rule sets (the engine's own code)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct RulesArg {
    /// The rule set directory (tier directories and `lists/`).
    #[arg(long, default_value = "rules")]
    rules: PathBuf,
    /// Machine-readable output: one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile and lint the rule set; print every problem as `file:line:column: message`.
    Validate {
        #[command(flatten)]
        a: RulesArg,
        /// Fail on lint warnings too.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Run the samples and hold them to the ratchet: a sample that passed before must still pass.
    Test {
        #[command(flatten)]
        a: RulesArg,
        /// Sample directory (default: `<rules>/samples`).
        #[arg(long)]
        samples: Option<PathBuf>,
        /// The ratchet file (default: `<samples>/ratchet.txt`).
        #[arg(long)]
        ratchet: Option<PathBuf>,
        /// Rewrite the ratchet to exactly the passing samples (review the diff before committing).
        #[arg(long)]
        update_ratchet: bool,
        /// Run only the named samples and print their full decisions (reproducing a failure).
        #[arg(long = "only", value_name = "SAMPLE")]
        only: Vec<String>,
    },
    /// Decisions that change against a base rule set (a directory or a git ref), over the samples
    /// and over a recorded-traffic file.
    Diff {
        #[command(flatten)]
        a: RulesArg,
        /// The base: a rule directory, or a git ref (`origin/main`, `HEAD~1`, a tag).
        #[arg(long)]
        base: String,
        /// Sample directory (default: `<rules>/samples`; `none` skips the samples).
        #[arg(long)]
        samples: Option<PathBuf>,
        /// Recorded traffic: decisions as JSON lines (`rampart-rules record`).
        #[arg(long)]
        traffic: Option<PathBuf>,
        /// Examples of changed decisions to list.
        #[arg(long, default_value_t = 50)]
        examples: usize,
        /// Exit 1 when any decision changes.
        #[arg(long)]
        fail_on_change: bool,
    },
    /// Build a bundle of the rule set with a manifest of content hashes, signed with Ed25519.
    Bundle {
        #[command(flatten)]
        a: RulesArg,
        /// The secret key file (`rampart-rules keygen`).
        #[arg(long, conflicts_with = "key_env")]
        key: Option<PathBuf>,
        /// Or: the environment variable holding the secret key's text (for CI secrets).
        #[arg(long)]
        key_env: Option<String>,
        /// Build it unsigned (accepted only by an engine in dev mode).
        #[arg(long, conflicts_with_all = ["key", "key_env"])]
        unsigned: bool,
        /// The change's description (default: the last commit's subject).
        #[arg(long)]
        message: Option<String>,
        /// Where to write the bundle.
        #[arg(long, default_value = "rules-bundle.json")]
        out: PathBuf,
    },
    /// Check a bundle's signature and content against public keys, as the engine does.
    Verify {
        bundle: PathBuf,
        /// A trusted public key: a `.pub` file or `ed25519:<base64>` (repeatable).
        #[arg(long = "public-key", required = true)]
        public_keys: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Make an Ed25519 key pair: `<out>.key` (secret, mode 0600) and `<out>.pub`.
    Keygen {
        #[arg(long, default_value = "rampart-rules")]
        out: PathBuf,
    },
    /// Upload a bundle to an engine and move it to a stage: `shadow`, `canary:<percent>`, or
    /// `stable` (an approval: needs an approver token of someone other than the uploader).
    Promote {
        bundle: PathBuf,
        /// The engine's base URL.
        #[arg(long)]
        engine: String,
        #[arg(long)]
        stage: String,
        /// The environment variable holding the admin API token.
        #[arg(long, default_value = "RAMPART_TOKEN")]
        token_env: String,
        /// PEM file of the CA (or self-signed certificate) to trust for an `https://` engine,
        /// instead of the public roots.
        #[arg(long)]
        ca_file: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Save an engine's recorded decisions (with their requests) as a traffic file for `diff`.
    Record {
        #[arg(long)]
        engine: String,
        /// How far back.
        #[arg(long, default_value_t = 24.0)]
        hours: f64,
        /// At most this many decisions (newest first).
        #[arg(long, default_value_t = 100_000)]
        max: usize,
        #[arg(long, default_value = "traffic.jsonl")]
        out: PathBuf,
        #[arg(long, default_value = "RAMPART_TOKEN")]
        token_env: String,
        /// PEM file of the CA to trust for an `https://` engine (see `promote`).
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
}

/// A failed command: `Check` = exit 1 (the thing checked is wrong), `Run` = exit 2.
enum Fail {
    Check(String),
    Run(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Run(s)
    }
}

type Out = Result<String, Fail>;

pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Validate { a, deny_warnings } => validate(&a, deny_warnings),
        Cmd::Test {
            a,
            samples,
            ratchet,
            update_ratchet,
            only,
        } => test(&a, samples, ratchet, update_ratchet, &only),
        Cmd::Diff {
            a,
            base,
            samples,
            traffic,
            examples,
            fail_on_change,
        } => diff(&a, &base, samples, traffic, examples, fail_on_change),
        Cmd::Bundle {
            a,
            key,
            key_env,
            unsigned,
            message,
            out,
        } => bundle(&a, key, key_env, unsigned, message, &out),
        Cmd::Verify {
            bundle,
            public_keys,
            json,
        } => verify(&bundle, &public_keys, json),
        Cmd::Keygen { out } => keygen(&out),
        Cmd::Promote {
            bundle,
            engine,
            stage,
            token_env,
            ca_file,
            json,
        } => promote(
            &bundle,
            &engine,
            &stage,
            &token_env,
            ca_file.as_deref(),
            json,
        ),
        Cmd::Record {
            engine,
            hours,
            max,
            out,
            token_env,
            ca_file,
        } => record(&engine, hours, max, &out, &token_env, ca_file.as_deref()),
    };
    match r {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(Fail::Check(text)) => {
            print!("{text}");
            ExitCode::from(1)
        }
        Err(Fail::Run(e)) => {
            eprintln!("rampart-rules: {e}");
            ExitCode::from(2)
        }
    }
}

fn pretty(v: &Value) -> String {
    format!("{v:#}\n")
}

fn located(errs: &[RuleError]) -> String {
    errs.iter().map(|e| format!("{e}\n")).collect()
}

fn read_sources(dir: &Path) -> Result<Vec<Source>, String> {
    rampart_files::read_sources(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Compiles `sources` against fresh in-memory stores, as the engine's upload does.
fn compile(sources: &[Source]) -> Result<RuleSet, Vec<RuleError>> {
    RuleSet::compile(sources, RuleSettings::default(), &RuleState::local(1 << 16))
}

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

fn validate(a: &RulesArg, deny_warnings: bool) -> Out {
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

/// A progress bar on stderr for `n` samples (drawn only when stderr is a terminal and the output
/// is for people).
fn bar(n: usize, what: &str, json: bool) -> indicatif::ProgressBar {
    if json {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(n as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}

fn run_samples(runner: &Runner, samples: &[Sample], what: &str, json: bool) -> Report {
    let pb = bar(samples.len(), what, json);
    let report = runner.run_with_progress(samples, &|| pb.inc(1));
    pb.finish_and_clear();
    report
}

fn runner(sources: Vec<Source>) -> Result<Runner, Fail> {
    Runner::new(sources, RuleSettings::default()).map_err(|errs| {
        Fail::Check(format!(
            "{}the rule set does not compile ({} problem(s)); see `rampart-rules validate`\n",
            located(&errs),
            errs.len()
        ))
    })
}

fn samples_dir(a: &RulesArg, samples: Option<PathBuf>) -> PathBuf {
    samples.unwrap_or_else(|| a.rules.join("samples"))
}

fn load_samples(dir: &Path) -> Result<Vec<Sample>, Fail> {
    let samples = rampart_files::read_samples(dir).map_err(Fail::Run)?;
    let mut seen = BTreeSet::new();
    if let Some(dup) = samples.iter().find(|s| !seen.insert(s.name.as_str())) {
        return Err(Fail::Run(format!(
            "{}: two samples are named {:?}; the ratchet needs unique names",
            dir.display(),
            dup.name
        )));
    }
    Ok(samples)
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

fn test(
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

/// The base rule set: a directory, or the rule directory at a git ref.
fn base_sources(rules: &Path, base: &str) -> Result<(Vec<Source>, String), String> {
    let p = Path::new(base);
    if p.is_dir() {
        return Ok((read_sources(p)?, p.display().to_string()));
    }
    Ok((git::sources_at(rules, base)?, format!("git {base}")))
}

fn diff(
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

fn read_key(key: Option<PathBuf>, key_env: Option<String>) -> Result<SecretKey, String> {
    let text = match (key, key_env) {
        (Some(p), _) => std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?,
        (None, Some(var)) => {
            std::env::var(&var).map_err(|_| format!("environment variable {var} is not set"))?
        }
        (None, None) => {
            return Err("give --key FILE or --key-env VAR (or --unsigned for a dev engine)".into())
        }
    };
    SecretKey::parse(&text)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn bundle(
    a: &RulesArg,
    key: Option<PathBuf>,
    key_env: Option<String>,
    unsigned: bool,
    message: Option<String>,
    out: &Path,
) -> Out {
    let key = if unsigned {
        None
    } else {
        Some(read_key(key, key_env)?)
    };
    let sources = read_sources(&a.rules)?;
    let set = compile(&sources).map_err(|errs| {
        Fail::Check(format!(
            "{}not bundled: the rule set does not compile\n",
            located(&errs)
        ))
    })?;
    let origin = git::origin(&a.rules);
    let message = message.unwrap_or_else(|| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&a.rules)
            .args(["log", "-1", "--format=%s"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    });
    let files: BTreeMap<String, String> = sources.into_iter().map(|s| (s.path, s.text)).collect();
    let mut b = Bundle::new(
        files,
        now_ms(),
        &message,
        origin.clone(),
        concat!("rampart-rules ", env!("CARGO_PKG_VERSION")),
    );
    if let Some(k) = &key {
        b.sign(k);
    }
    let text = serde_json::to_string(&b).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    let key_id = b.signature.as_ref().map(|s| s.key_id.clone());
    Ok(if a.json {
        pretty(&json!({
            "bundle": out, "version": set.version(), "files": b.files.len(),
            "rules": set.rule_count(), "key_id": key_id, "origin": origin,
        }))
    } else {
        format!(
            "{}: version {}, {} rules in {} files, {}{}\n",
            out.display(),
            set.version(),
            set.rule_count(),
            b.files.len(),
            match &key_id {
                Some(id) => format!("signed by key {id}"),
                None => "UNSIGNED (dev engines only)".into(),
            },
            origin
                .commit
                .as_deref()
                .map(|c| format!(
                    ", commit {}{}",
                    &c[..c.len().min(12)],
                    if origin.dirty {
                        " + uncommitted changes"
                    } else {
                        ""
                    }
                ))
                .unwrap_or_default()
        )
    })
}

/// A refused bundle, for people or as JSON.
fn bundle_refused(
    path: &Path,
    e: &rampart_core::lifecycle::bundle::BundleError,
    json: bool,
) -> Fail {
    Fail::Check(if json {
        pretty(&json!({ "ok": false, "code": e.code(), "message": e.to_string() }))
    } else {
        format!("{}: refused: {} ({})\n", path.display(), e, e.code())
    })
}

fn read_bundle(path: &Path, json: bool) -> Result<(Bundle, Vec<u8>), Fail> {
    let bytes = std::fs::read(path).map_err(|e| Fail::Run(format!("{}: {e}", path.display())))?;
    let b = Bundle::parse(&bytes).map_err(|e| bundle_refused(path, &e, json))?;
    Ok((b, bytes))
}

fn verify(path: &Path, keys: &[String], json: bool) -> Out {
    let trusted = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let text = if k.starts_with(rampart_core::lifecycle::bundle::PUBLIC_PREFIX) {
                k.clone()
            } else {
                std::fs::read_to_string(k).map_err(|e| format!("{k}: {e}"))?
            };
            PublicKey::parse(&format!("key{}", i + 1), &text).map_err(|e| format!("{k}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (b, _) = read_bundle(path, json)?;
    match b.verify(&trusted, false) {
        Ok(v) => Ok(if json {
            pretty(
                &json!({ "ok": true, "version": v.manifest.version, "key_id": v.signed_by.map(|(_, id)| id), "manifest": v.manifest }),
            )
        } else {
            format!(
                "{}: valid, version {}, {} files, signed by key {}\n",
                path.display(),
                v.manifest.version,
                v.manifest.files.len(),
                v.signed_by.map(|(_, id)| id).unwrap_or_default()
            )
        }),
        Err(e) => Err(bundle_refused(path, &e, json)),
    }
}

fn keygen(out: &Path) -> Out {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
    let key = SecretKey::from_seed(seed);
    let secret = out.with_extension("key");
    let public = out.with_extension("pub");
    for p in [&secret, &public] {
        if p.exists() {
            return Err(Fail::Run(format!(
                "{} exists; not overwriting a key",
                p.display()
            )));
        }
    }
    write_private(&secret, &format!("{}\n", key.to_text()))
        .map_err(|e| format!("{}: {e}", secret.display()))?;
    let pk = key.public("ci");
    std::fs::write(&public, format!("{}\n", pk.to_text()))
        .map_err(|e| format!("{}: {e}", public.display()))?;
    Ok(format!(
        "secret key: {} (keep it in your CI's secret store; never commit it)\npublic key: {} (key id {})\n\nthe engine's config:\n[[admin.bundle_keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
        secret.display(),
        public.display(),
        pk.id,
        pk.to_text()
    ))
}

/// Creates `path` readable by its owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)?.write_all(text.as_bytes())
}

/// A small admin API client.
struct Api {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn new(engine: &str, token_env: &str, ca_file: Option<&Path>) -> Result<Api, String> {
        let token = std::env::var(token_env).map_err(|_| {
            format!("environment variable {token_env} (the admin API token) is not set")
        })?;
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(path) = ca_file {
            if !engine.starts_with("https://") {
                return Err(format!(
                    "--ca-file is for an https:// engine; {engine} would get the token in clear"
                ));
            }
            let pem =
                std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
            let mut certs: Vec<ureq::tls::Certificate<'static>> = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                // A damaged file is refused whole, even when one certificate in it parses.
                if let ureq::tls::PemItem::Certificate(c) =
                    item.map_err(|e| format!("--ca-file {}: {e}", path.display()))?
                {
                    certs.push(c);
                }
            }
            if certs.is_empty() {
                return Err(format!(
                    "--ca-file {}: no PEM certificate in it",
                    path.display()
                ));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        Ok(Api {
            base: engine.trim_end_matches('/').to_string(),
            token,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(120)))
                .tls_config(tls.build())
                .build()
                .into(),
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<String>) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let r = match body {
            Some(b) => self
                .agent
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b),
            None if method == "GET" => self.agent.get(&url).header("authorization", &auth).call(),
            None => self
                .agent
                .post(&url)
                .header("authorization", &auth)
                .send_empty(),
        };
        let mut r = r.map_err(|e| format!("{url}: {e}"))?;
        let status = r.status().as_u16();
        let text = r
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| format!("{url}: {e}"))?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }
}

/// An engine's refusal as the command's failure.
fn refused(what: &str, status: u16, v: &Value) -> Fail {
    Fail::Check(format!(
        "{what} refused: HTTP {status} {}: {}\n",
        v["error"]["code"].as_str().unwrap_or("-"),
        v["error"]["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_string)
    ))
}

fn promote(
    path: &Path,
    engine: &str,
    stage: &str,
    token_env: &str,
    ca_file: Option<&Path>,
    json: bool,
) -> Out {
    let (stage_name, percent) = match stage.split_once(':') {
        None if stage == "shadow" || stage == "stable" => (stage, None),
        Some(("canary", p)) => match p.parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => ("canary", Some(p)),
            _ => {
                return Err(Fail::Run(format!(
                    "--stage canary:{p}: the percentage must be in (0, 100]"
                )))
            }
        },
        _ => {
            return Err(Fail::Run(format!(
                "--stage {stage:?}: use shadow, canary:<percent> or stable"
            )))
        }
    };
    let (_, bytes) = read_bundle(path, json)?;
    let api = Api::new(engine, token_env, ca_file)?;
    let (status, up) = api.call(
        "POST",
        "/admin/v1/rulesets",
        Some(String::from_utf8_lossy(&bytes).into_owned()),
    )?;
    if status != 200 && status != 201 {
        return Err(refused("upload", status, &up));
    }
    let version = up["version"].as_str().unwrap_or_default().to_string();
    let (status, state) = if stage_name == "stable" {
        api.call(
            "POST",
            "/admin/v1/rollout/approve",
            Some(json!({ "version": version }).to_string()),
        )?
    } else {
        api.call(
            "POST",
            "/admin/v1/rollout",
            Some(
                json!({ "version": version, "stage": stage_name, "percent": percent }).to_string(),
            ),
        )?
    };
    if status != 200 {
        return Err(refused(
            &format!("{stage_name} of {version}"),
            status,
            &state,
        ));
    }
    Ok(if json {
        pretty(
            &json!({ "version": version, "created": up["created"], "stage": stage, "rollout": state }),
        )
    } else {
        format!(
            "uploaded {version} ({}); {}\nstable: {}, candidate: {}\n",
            if up["created"] == true {
                "new"
            } else {
                "already known"
            },
            match stage_name {
                "stable" => "approved: it is now stable".to_string(),
                "canary" => format!("canary at {}%", percent.unwrap_or_default()),
                _ => "in shadow".to_string(),
            },
            state["stable"].as_str().unwrap_or("-"),
            state["candidate"]["version"].as_str().unwrap_or("-")
        )
    })
}

fn record(
    engine: &str,
    hours: f64,
    max: usize,
    out: &Path,
    token_env: &str,
    ca_file: Option<&Path>,
) -> Out {
    if !(hours > 0.0 && hours <= 24.0 * 31.0) {
        return Err(Fail::Run("--hours must be in (0, 744]".into()));
    }
    let api = Api::new(engine, token_env, ca_file)?;
    let to = now_ms() + 1;
    let from = to - (hours * 3_600_000.0) as i64;
    let mut cursor: Option<String> = None;
    let mut text = String::new();
    let mut n = 0usize;
    let pb = bar(max, "decisions", false);
    while n < max {
        let mut q = format!(
            "/admin/v1/decisions?from={from}&to={to}&limit={}",
            (max - n).min(1000)
        );
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={}", c.replace(':', "%3A")));
        }
        let (status, page) = api.call("GET", &q, None)?;
        if status != 200 {
            return Err(refused("decision query", status, &page));
        }
        let rows = page["decisions"].as_array().cloned().unwrap_or_default();
        for r in &rows {
            text.push_str(&r.to_string());
            text.push('\n');
        }
        n += rows.len();
        pb.inc(rows.len() as u64);
        match page["next"].as_str() {
            Some(c) if !rows.is_empty() => cursor = Some(c.to_string()),
            _ => break,
        }
    }
    pb.finish_and_clear();
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(format!(
        "{}: {n} decisions from the last {hours} h\n",
        out.display()
    ))
}
