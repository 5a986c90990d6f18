//! `rampart-rules`: the rule pipeline for CI. It validates, tests, diffs, bundles, signs and
//! promotes rule sets with the engine core's own compiler and regression runner
//! (`rampart_core::rules`, `rampart_core::lifecycle::regress`, `rampart_core::lifecycle::backtest`,
//! `rampart_core::lifecycle::bundle`), so a set that passes here cannot fail at upload for another reason.
//!
//! Exit codes: 0 success, 1 the check failed (invalid rules, a ratchet regression, a refused
//! bundle or promotion), 2 the command could not run (bad arguments, unreadable files, no
//! connection).
mod bundle;
mod check;
mod diff;
mod engine;
mod git;
mod ratchet;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rampart_core::lifecycle::regress::{Report, Runner, Sample};
use rampart_core::rules::{RuleError, RuleSet, RuleSettings, RuleState, Source};
use serde_json::Value;

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
        Cmd::Validate { a, deny_warnings } => check::validate(&a, deny_warnings),
        Cmd::Test {
            a,
            samples,
            ratchet,
            update_ratchet,
            only,
        } => check::test(&a, samples, ratchet, update_ratchet, &only),
        Cmd::Diff {
            a,
            base,
            samples,
            traffic,
            examples,
            fail_on_change,
        } => diff::diff(&a, &base, samples, traffic, examples, fail_on_change),
        Cmd::Bundle {
            a,
            key,
            key_env,
            unsigned,
            message,
            out,
        } => bundle::bundle(&a, key, key_env, unsigned, message, &out),
        Cmd::Verify {
            bundle,
            public_keys,
            json,
        } => bundle::verify(&bundle, &public_keys, json),
        Cmd::Keygen { out } => bundle::keygen(&out),
        Cmd::Promote {
            bundle,
            engine,
            stage,
            token_env,
            ca_file,
            json,
        } => engine::promote(
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
        } => engine::record(&engine, hours, max, &out, &token_env, ca_file.as_deref()),
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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
