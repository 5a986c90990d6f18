//! `rampart regress`: replays `rules/samples/` (and optionally the OWASP CRS corpus) through a
//! rule set with the core's regression runner and prints detection and false-positive rates,
//! per-rule hits, failing samples, and the samples whose decision changes against another set.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rampart_core::lifecycle::regress::{Kind, Report, Runner, Sample};
use rampart_core::rules::RuleSettings;
use rampart_core::waf::crs::SharedCrs;

use rampart_files::{read_samples, read_sources};

#[derive(clap::Args)]
pub struct RegressArgs {
    /// Rule set directory.
    #[arg(long, default_value = "rules")]
    rules: PathBuf,
    /// Sample directory (every `*.json` below it is a sample).
    #[arg(long, default_value = "rules/samples")]
    samples: PathBuf,
    /// Also replay a CRS-format corpus (JSON lines) and report rates by paranoia level.
    #[arg(long)]
    crs: Option<PathBuf>,
    /// Compare with another rule set: list the samples whose decision changes.
    #[arg(long)]
    against: Option<PathBuf>,
    /// Print the full report as JSON.
    #[arg(long)]
    json: bool,
    /// Configuration whose `[waf]` section sets up the CRS for `crs(req)` (default: the embedded
    /// defaults, which run Debian's CRS when it is installed).
    #[arg(long)]
    config: Option<PathBuf>,
    /// List every failing sample (default: the first 20).
    #[arg(long)]
    all: bool,
}

fn runner(dir: &Path, crs: &Option<SharedCrs>) -> Result<Runner, String> {
    let sources = read_sources(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Runner::new(sources, RuleSettings::default())
        .map(|r| r.with_crs(crs.clone()))
        .map_err(|errs| {
            errs.iter()
                .map(|e| format!("{}:{}:{}: {}", e.file, e.line, e.column, e.message))
                .collect::<Vec<_>>()
                .join("\n")
        })
}

/// The CRS of the configuration's `[waf]` section (embedded defaults when none is given).
fn crs(config: Option<&Path>) -> Result<Option<SharedCrs>, String> {
    let c = crate::config::Config::load(config).map_err(|e| e.to_string())?;
    c.waf.load().map_err(|e| e.join("\n"))
}

pub fn run(a: RegressArgs) -> ExitCode {
    match regress(&a) {
        Ok((text, ok)) => {
            print!("{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("rampart regress: {e}");
            ExitCode::from(2)
        }
    }
}

fn pct(hits: u64, total: u64) -> String {
    if total == 0 {
        "—".into()
    } else {
        format!(
            "{hits}/{total} ({:.1}%)",
            100.0 * hits as f64 / total as f64
        )
    }
}

fn regress(a: &RegressArgs) -> Result<(String, bool), String> {
    let crs = crs(a.config.as_deref())?;
    let r = runner(&a.rules, &crs)?;
    let samples = read_samples(&a.samples)?;
    let report = r.run(&samples);
    let corpus = match &a.crs {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let lines: Result<Vec<Sample>, _> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(Sample::from_crs)
                .collect();
            Some(r.run(&lines.map_err(|e| e.to_string())?))
        }
        None => None,
    };
    let other = match &a.against {
        Some(dir) => Some(runner(dir, &crs)?.run(&samples)),
        None => None,
    };
    let ok = report.failures().next().is_none();
    if a.json {
        let v = serde_json::json!({
            "samples": report,
            "detection": report.detection(),
            "false_positives": report.false_positives(),
            "corpus": corpus,
            "changes": other.as_ref().map(|o| report.changes(o)),
        });
        return Ok((format!("{v:#}\n"), ok));
    }
    Ok((text_report(a, &report, corpus.as_ref(), other.as_ref()), ok))
}

fn text_report(
    a: &RegressArgs,
    report: &Report,
    corpus: Option<&Report>,
    other: Option<&Report>,
) -> String {
    let mut o = String::new();
    let kinds = |k: Kind| report.results.iter().filter(|r| r.kind == k).count();
    let _ = writeln!(
        o,
        "rule set {} (version {}) on {}: {} samples ({} attack, {} benign), {} pass their expected decision",
        a.rules.display(),
        report.ruleset_version,
        a.samples.display(),
        report.results.len(),
        kinds(Kind::Attack),
        kinds(Kind::Benign),
        report.passed()
    );
    let d = report.detection();
    let f = report.false_positives();
    let _ = writeln!(
        o,
        "  detection (attacks refused):         {}",
        pct(d.hits, d.total)
    );
    let _ = writeln!(
        o,
        "  false positives (benign refused):    {}",
        pct(f.hits, f.total)
    );
    let _ = writeln!(o, "\nby category (refused / total):");
    for ((kind, cat), rate) in report.by_category() {
        let _ = writeln!(
            o,
            "  {:<8} {:<22} {}",
            format!("{kind:?}").to_lowercase(),
            cat,
            pct(rate.hits, rate.total)
        );
    }
    let _ = writeln!(
        o,
        "\nrule hits (final decisions; shadow: would-be actions):"
    );
    for (rule, n) in &report.rule_hits {
        let _ = writeln!(o, "  {rule:<40} {n}");
    }
    let failures: Vec<_> = report.failures().collect();
    if !failures.is_empty() {
        let _ = writeln!(o, "\nfailing samples ({}):", failures.len());
        for r in failures.iter().take(if a.all { usize::MAX } else { 20 }) {
            let _ = writeln!(
                o,
                "  {}: expected {}{}{}, got {}",
                r.name,
                r.expect.action.as_str(),
                r.expect
                    .code
                    .as_deref()
                    .map(|c| format!(" {c}"))
                    .unwrap_or_default(),
                r.expect
                    .rule
                    .as_deref()
                    .map(|c| format!(" rule {c}"))
                    .unwrap_or_default(),
                r.got.summary()
            );
        }
    }
    if let Some(c) = corpus {
        let _ = writeln!(
            o,
            "\nCRS-format corpus ({} requests), refused at the edge by paranoia level:",
            c.results.len()
        );
        for ((kind, pl), rate) in c.edge_by_paranoia() {
            let label = match kind {
                Kind::Attack => "attack",
                Kind::Benign => "benign",
                Kind::Negative => "negative",
            };
            let _ = writeln!(o, "  {label:<9} PL{pl}: {}", pct(rate.hits, rate.total));
        }
        let _ = writeln!(o, "  by family (attacks; benign by route):");
        for ((kind, cat), rate) in c.edge_by_category() {
            if kind != Kind::Negative {
                let _ = writeln!(o, "    {cat:<18} {}", pct(rate.hits, rate.total));
            }
        }
    }
    if let Some(other) = other {
        let changes = report.changes(other);
        let _ = writeln!(
            o,
            "\nagainst {} (version {}): {} samples change decision",
            a.against
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            other.ruleset_version,
            changes.len()
        );
        for c in changes.iter().take(if a.all { usize::MAX } else { 50 }) {
            let _ = writeln!(
                o,
                "  {}: {} → {}",
                c.name,
                c.before.summary(),
                c.after.summary()
            );
        }
    }
    o
}
