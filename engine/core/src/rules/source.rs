//! A rule's source file and its metadata header: parsing, the errors it reports (file, line,
//! column), and the content hash that names a rule set's version.

use crate::policy::Tier;
use rhai::AST;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

/// One source file of a rule set: `edge/x.rhai`, `lists/y.txt`, … (paths relative to the rule
/// directory, with `/` separators).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: String,
    pub text: String,
}

/// A located validation failure.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Enforce,
    Shadow,
}

/// A rule's metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuleMeta {
    pub name: String,
    pub tier: &'static str,
    pub priority: i64,
    pub mode: Mode,
    pub owner: String,
    pub description: String,
    pub apps: Option<Vec<String>>,
    pub routes: Vec<String>,
    pub file: String,
}

pub(super) struct Rule {
    pub(super) meta: RuleMeta,
    /// The script answers with an outcome on every run (an outcome call outside any block).
    pub(super) always_terminal: bool,
    pub(super) ast: AST,
    /// Answers "no match" natively for most requests (see `precheck`).
    pub(super) precheck: Option<super::precheck::Precheck>,
    pub(super) errors: AtomicU64,
    pub(super) hits: AtomicU64,
    /// A hash of the rule's name (keys the IP-keyed edge helpers per rule).
    pub(super) id: u64,
}

impl Rule {
    pub(super) fn applies_to_route(&self, path: &str) -> bool {
        self.meta.routes.is_empty()
            || self.meta.routes.iter().any(|r| match r.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => path == r,
            })
    }
}

/// Per-rule counters and metadata, for the admin API and metrics.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleInfo {
    #[serde(flatten)]
    pub meta: RuleMeta,
    pub hits: u64,
    pub errors: u64,
}

pub(super) fn meta_error(file: &str, line: usize, message: impl Into<String>) -> RuleError {
    RuleError {
        file: file.to_string(),
        line,
        column: 1,
        message: message.into(),
    }
}

pub(super) fn parse_meta(src: &Source, tier: Tier, errs: &mut Vec<RuleError>) -> Option<RuleMeta> {
    let mut fields: HashMap<&str, (usize, &str)> = HashMap::new();
    for (i, line) in src.text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        let Some((k, v)) = rest.split_once(':') else {
            errs.push(meta_error(
                &src.path,
                i + 1,
                "metadata lines look like `//! key: value`",
            ));
            continue;
        };
        let key = k.trim();
        if ![
            "name",
            "priority",
            "mode",
            "owner",
            "description",
            "apps",
            "routes",
            "tier",
        ]
        .contains(&key)
        {
            errs.push(meta_error(
                &src.path,
                i + 1,
                format!("unknown metadata key {key:?}"),
            ));
            continue;
        }
        if fields.insert(key, (i + 1, v.trim())).is_some() {
            errs.push(meta_error(
                &src.path,
                i + 1,
                format!("metadata key {key:?} given twice"),
            ));
        }
    }
    let before = errs.len();
    let mut required = |k: &str| -> String {
        match fields.get(k) {
            Some((_, v)) if !v.is_empty() => v.to_string(),
            _ => {
                errs.push(meta_error(
                    &src.path,
                    1,
                    format!("missing metadata `//! {k}: …`"),
                ));
                String::new()
            }
        }
    };
    let name = required("name");
    let owner = required("owner");
    let description = required("description");
    let priority_raw = required("priority");
    let priority = match priority_raw.parse::<i64>() {
        Ok(p) => p,
        Err(_) => {
            if !priority_raw.is_empty() {
                let line = fields.get("priority").map(|x| x.0).unwrap_or(1);
                errs.push(meta_error(&src.path, line, "priority must be an integer"));
            }
            0
        }
    };
    let mode = match fields.get("mode").map(|x| x.1) {
        None | Some("enforce") => Mode::Enforce,
        Some("shadow") => Mode::Shadow,
        Some(other) => {
            let line = fields["mode"].0;
            errs.push(meta_error(
                &src.path,
                line,
                format!("mode must be enforce or shadow, not {other:?}"),
            ));
            Mode::Enforce
        }
    };
    if let Some((line, t)) = fields.get("tier") {
        if *t != tier.as_str() {
            errs.push(meta_error(
                &src.path,
                *line,
                format!(
                    "tier {t:?} does not match the directory {:?}",
                    tier.as_str()
                ),
            ));
        }
    }
    let split = |v: &str| -> Vec<String> {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let apps = fields
        .get("apps")
        .map(|x| split(x.1))
        .filter(|a| !a.iter().any(|x| x == "*"));
    let routes = fields.get("routes").map(|x| split(x.1)).unwrap_or_default();
    for r in &routes {
        if !r.starts_with('/') {
            let line = fields["routes"].0;
            errs.push(meta_error(
                &src.path,
                line,
                format!("route {r:?} must start with '/'"),
            ));
        } else if !crate::path::route_is_normal(r) {
            let line = fields["routes"].0;
            errs.push(meta_error(
                &src.path,
                line,
                format!(
                    "route {r:?} is not in the normal form requests are matched in (no empty, . \
                     or .. segments, no trailing /): it would never match"
                ),
            ));
        }
    }
    if errs.len() > before {
        return None;
    }
    Some(RuleMeta {
        name,
        tier: tier.as_str(),
        priority,
        mode,
        owner,
        description,
        apps,
        routes,
        file: src.path.clone(),
    })
}

/// A rule set's version: the content hash over every file's path and text (in path order), the
/// same whoever computes it (server, pipeline, bundle manifest).
pub fn content_version(sources: &[Source]) -> String {
    let mut sorted: Vec<&Source> = sources.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut h = Sha256::new();
    for s in &sorted {
        h.update((s.path.len() as u64).to_le_bytes());
        h.update(s.path.as_bytes());
        h.update((s.text.len() as u64).to_le_bytes());
        h.update(s.text.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}
