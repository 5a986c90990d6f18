//! The samples the server regresses candidate rule sets against, and a regression report as JSON:
//! shared by `rampart regress` and the admin API's regression endpoint.

use rampart_core::lifecycle::regress::{Report, Sample};
use rampart_files::read_samples;

/// The samples the server regresses candidates against: `[rules] samples_dir`, else
/// `<[rules] dir>/samples` when it exists, else the samples built into the binary.
pub fn server_samples(cfg: &crate::config::Validated) -> Result<Vec<Sample>, String> {
    let r = &cfg.raw.rules;
    let dir = r.samples_dir.clone().or_else(|| {
        r.dir
            .as_ref()
            .map(|d| d.join("samples"))
            .filter(|d| d.is_dir())
    });
    if let Some(dir) = dir {
        return read_samples(&dir);
    }
    crate::runtime::default_samples()
        .iter()
        .map(|(p, t)| Sample::parse(p, t).map_err(|e| e.to_string()))
        .collect()
}

/// A regression report as JSON: rates, per-rule hits, failing samples and, against another
/// report, the samples whose decision changes.
pub fn report_json(r: &Report, against: Option<&Report>) -> serde_json::Value {
    serde_json::json!({
        "version": r.ruleset_version,
        "samples": r.results.len(),
        "passed": r.passed(),
        "detection": r.detection(),
        "false_positives": r.false_positives(),
        "rule_hits": r.rule_hits,
        "failures": r.failures().take(200).collect::<Vec<_>>(),
        "against": against.map(|o| o.ruleset_version.clone()),
        // before = the other set (stable), after = this one (the candidate).
        "changes": against.map(|o| o.changes(r)),
    })
}
