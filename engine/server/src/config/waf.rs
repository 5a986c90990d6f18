//! `[waf]`: the OWASP Core Rule Set that the edge tier's `crs(req)` runs (rules directory,
//! paranoia level, anomaly threshold, files left out, exclusion files).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rampart_core::waf::crs::{Crs, CrsOptions, DEFAULT_SKIP};
use serde::Deserialize;

/// Where Debian's `modsecurity-crs` package puts the rules.
pub const DEBIAN_CRS_DIR: &str = "/usr/share/modsecurity-crs/rules";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WafConfig {
    /// Run the CRS (when a rules directory is found).
    pub crs: bool,
    /// The CRS `rules/` directory (its `REQUEST-*.conf` and `*.data` files). Absent: Debian's
    /// package path when it exists, else the CRS is off and `crs(req)` finds nothing.
    pub crs_dir: Option<PathBuf>,
    /// Paranoia level the rules run at, 1–4.
    pub paranoia: u8,
    /// Inbound anomaly score at which `crs(req)` reports the request.
    pub threshold: i64,
    /// File name prefixes of the rules directory left out.
    pub skip: Vec<String>,
    /// Apply Rampart's exclusions (rules that fire on ordinary shop traffic; docs/waf.md).
    pub default_exclusions: bool,
    /// The operator's exclusion files (SecLang: `SecRuleRemoveById`, `SecRuleUpdateTargetById`,
    /// …), loaded after the CRS and Rampart's exclusions, in order.
    pub exclusions: Vec<PathBuf>,
    /// Answers of the edge tier's own detectors remembered per worker thread, for header values
    /// and for paths each (a full cache starts over).
    pub cache_entries: usize,
}

impl Default for WafConfig {
    fn default() -> Self {
        let o = CrsOptions::default();
        WafConfig {
            crs: true,
            crs_dir: None,
            paranoia: o.paranoia,
            threshold: o.threshold,
            skip: DEFAULT_SKIP.iter().map(|s| s.to_string()).collect(),
            default_exclusions: o.default_exclusions,
            exclusions: Vec::new(),
            cache_entries: rampart_core::memo::DEFAULT_BOUND,
        }
    }
}

impl WafConfig {
    /// The rules directory in use: `crs_dir`, else Debian's when present; None when off.
    pub fn dir(&self) -> Option<PathBuf> {
        if !self.crs {
            return None;
        }
        match &self.crs_dir {
            Some(d) => Some(d.clone()),
            None => Path::new(DEBIAN_CRS_DIR)
                .is_dir()
                .then(|| PathBuf::from(DEBIAN_CRS_DIR)),
        }
    }

    /// Checks `[waf]`; every problem goes into `errs`.
    pub(super) fn check(&self, errs: &mut Vec<String>) {
        if !(1..=1_000_000).contains(&self.cache_entries) {
            errs.push(format!(
                "waf.cache_entries must be 1 to 1000000, not {}",
                self.cache_entries
            ));
        }
        if !(1..=4).contains(&self.paranoia) {
            errs.push(format!(
                "waf.paranoia must be 1 to 4, not {}",
                self.paranoia
            ));
        }
        if self.threshold < 1 {
            errs.push(format!(
                "waf.threshold must be at least 1, not {}",
                self.threshold
            ));
        }
        if let Some(d) = &self.crs_dir {
            if self.crs && !d.is_dir() {
                errs.push(format!("waf.crs_dir {} is not a directory", d.display()));
            }
        }
        for f in &self.exclusions {
            if !f.is_file() {
                errs.push(format!("waf.exclusions: {} is not a file", f.display()));
            }
        }
    }

    /// Reads and compiles the CRS (None when it is off). Errors name the file and line.
    pub fn load(&self) -> Result<Option<Arc<Crs>>, Vec<String>> {
        let Some(dir) = self.dir() else {
            return Ok(None);
        };
        let read_dir = std::fs::read_dir(&dir)
            .map_err(|e| vec![format!("waf.crs_dir {}: {e}", dir.display())])?;
        let mut files = Vec::new();
        for entry in read_dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("REQUEST-") && name.ends_with(".conf") {
                let text = std::fs::read_to_string(entry.path())
                    .map_err(|e| vec![format!("waf: {}: {e}", entry.path().display())])?;
                files.push((name, text));
            }
        }
        if files.is_empty() {
            return Err(vec![format!(
                "waf.crs_dir {} has no REQUEST-*.conf files",
                dir.display()
            )]);
        }
        let mut after = Vec::new();
        for f in &self.exclusions {
            let text = std::fs::read_to_string(f)
                .map_err(|e| vec![format!("waf.exclusions: {}: {e}", f.display())])?;
            after.push((f.display().to_string(), text));
        }
        let options = CrsOptions {
            paranoia: self.paranoia,
            threshold: self.threshold,
            skip: self.skip.clone(),
            default_exclusions: self.default_exclusions,
        };
        // Data files (`@pmFromFile`) are named relative to the rules directory, and only there.
        let data = |name: &str| -> Result<String, String> {
            if name.contains("..") || name.starts_with('/') {
                return Err(format!("data file {name} is outside the rules directory"));
            }
            std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{name}: {e}"))
        };
        Crs::build(&files, &after, &data, options)
            .map(|c| Some(Arc::new(c)))
            .map_err(|es| es.into_iter().map(|e| format!("waf: {e}")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rampart-waf-{}-{}",
            std::process::id(),
            files.len()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (n, t) in files {
            std::fs::write(d.join(n), t).unwrap();
        }
        d
    }

    #[test]
    fn bad_values_are_reported() {
        let w = WafConfig {
            paranoia: 5,
            threshold: 0,
            crs_dir: Some("/nonexistent/crs".into()),
            exclusions: vec!["/nonexistent/x.conf".into()],
            ..WafConfig::default()
        };
        let mut errs = Vec::new();
        w.check(&mut errs);
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].contains("waf.paranoia must be 1 to 4"));
        assert!(errs[2].contains("/nonexistent/crs is not a directory"));
        // Off: a missing directory is not an error.
        let mut errs = Vec::new();
        WafConfig {
            crs: false,
            crs_dir: Some("/nonexistent/crs".into()),
            ..WafConfig::default()
        }
        .check(&mut errs);
        assert!(errs.is_empty());
    }

    #[test]
    fn a_rules_directory_loads_and_a_broken_one_is_located() {
        let good = dir_with(&[
            ("REQUEST-942-TEST.conf", "SecRule ARGS \"@pmFromFile words.data\" \"id:942999,phase:2,deny,severity:'CRITICAL'\"\n"),
            ("words.data", "union select\n"),
        ]);
        let w = WafConfig {
            crs_dir: Some(good.clone()),
            default_exclusions: false,
            ..WafConfig::default()
        };
        let crs = w.load().unwrap().expect("loaded");
        assert_eq!(crs.rule_counts().0, 1);
        let bad = dir_with(&[
            (
                "REQUEST-942-TEST.conf",
                "\nSecRule ARGS \"@rx (\" \"id:1,phase:2\"\n",
            ),
            ("a", ""),
            ("b", ""),
        ]);
        let errs = WafConfig {
            crs_dir: Some(bad.clone()),
            ..WafConfig::default()
        }
        .load()
        .unwrap_err();
        assert!(
            errs[0].starts_with("waf: REQUEST-942-TEST.conf:2:"),
            "{errs:?}"
        );
        // Data files are read from the rules directory only.
        let escape = dir_with(&[
            (
                "REQUEST-942-TEST.conf",
                "SecRule ARGS \"@pmFromFile ../../etc/passwd\" \"id:2,phase:2\"\n",
            ),
            ("c", ""),
        ]);
        let errs = WafConfig {
            crs_dir: Some(escape.clone()),
            ..WafConfig::default()
        }
        .load()
        .unwrap_err();
        assert!(errs[0].contains("outside the rules directory"), "{errs:?}");
        assert!(WafConfig {
            crs: false,
            ..WafConfig::default()
        }
        .load()
        .unwrap()
        .is_none());
        for d in [good, bad, escape] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
