//! A native engine for the request-phase subset of ModSecurity's rule language (SecLang) that the
//! OWASP Core Rule Set (CRS) is written in: `SecRule` with its variables, operators,
//! transformations, chains, `setvar` anomaly scoring, `skipAfter` paranoia-level gates, `ctl`
//! runtime exclusions, and the configuration-time exclusions `SecRuleRemoveById`,
//! `SecRuleRemoveByTag` and `SecRuleUpdateTargetById`/`ByTag`.
//!
//! It does no I/O: the caller hands it the text of each rule file and a function that reads the
//! data files `@pmFromFile` names. Rules of the response and logging phases are dropped at load;
//! persistent collections (`IP`, `GLOBAL`, `SESSION`) and the network operators (`@rbl`,
//! `@geoLookup`) are not kept (their rules never match, and loading lists them as warnings).
//!
//! Regexes are compiled by the `regex` crate over bytes with PCRE's default (non-UTF) classes,
//! dot-all and multi-line, as ModSecurity v3 compiles them. The few patterns it cannot read
//! (look-around, back-references: a handful in CRS 3.3, none in CRS v4, whose regexes are built to
//! be RE2-compatible) go to `fancy-regex`, which backtracks with a step limit; a pattern neither
//! reads is a load error that names the file and line.

mod bestfit;
pub mod body;
pub mod compile;
pub mod eval;
pub mod ops;
pub mod parse;
pub mod prefilter;
mod specialize;
pub mod transform;
pub mod vars;

use compile::{Builder, Compiled, Item};

/// A load error, located.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct Error {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl Error {
    pub fn at(file: &str, line: usize, message: String) -> Error {
        Error {
            file: file.to_string(),
            line,
            message,
        }
    }
}

/// The request a transaction judges.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query as sent (`/a/b?x=1`).
    pub uri: &'a str,
    pub protocol: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: &'a [u8],
    pub remote_addr: &'a str,
}

/// A rule with a severity that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched {
    pub id: u32,
    pub severity: Option<u8>,
    /// From the rule's `paranoia-level/N` tag.
    pub paranoia: Option<u8>,
    pub msg: String,
    /// The variable that matched last (`ARGS:q`).
    pub var: String,
    pub data: String,
}

/// What a transaction found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub matched: Vec<Matched>,
    /// The rule whose `deny`/`drop` (or `block` under a denying default) stopped the transaction,
    /// e.g. CRS's inbound anomaly score check (949110).
    pub interrupted: Option<u32>,
    /// A rule whose `allow` ended evaluation.
    pub allowed: Option<u32>,
    /// The inbound anomaly score the rules computed (`tx.blocking_inbound_anomaly_score` in CRS
    /// v4, `tx.anomaly_score` in 3.x).
    pub score: i64,
}

/// A compiled rule set, shared by every thread.
#[derive(Debug)]
pub struct Ruleset {
    compiled: Compiled,
    /// What the set has learnt about values it has judged (see `eval::ValueMemo`).
    memo: eval::ValueMemo,
    /// TX as the rules folded at load leave it (see `specialize`).
    initial_tx: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    folded: usize,
}

impl Ruleset {
    /// Compiles `files` (name, text) in order. Every error is returned, located.
    pub fn build(
        files: &[(String, String)],
        data: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Ruleset, Vec<Error>> {
        let mut b = Builder::new(data);
        for (name, text) in files {
            b.file(name, text);
        }
        let mut rs = Ruleset {
            compiled: b.finish()?,
            initial_tx: Default::default(),
            folded: 0,
            memo: Default::default(),
        };
        if std::env::var_os("SECLANG_NO_SPECIALIZE").is_none() {
            rs.folded = specialize::specialize(&mut rs);
        }
        if std::env::var_os("SECLANG_NO_TARGET_GROUPS").is_none() {
            compile::group_targets(&mut rs.compiled);
        }
        compile::number_verdicts(&mut rs.compiled);
        Ok(rs)
    }

    /// Judges one request.
    pub fn evaluate(&self, req: &Request<'_>) -> Outcome {
        eval::Tx::new(self, req).run()
    }

    /// Forgets what the set has learnt about values (benchmarks measure the cold cost so).
    pub fn clear_memo(&self) {
        self.memo.clear();
    }

    /// Things loading ignored or could not honour (directives, actions, operators).
    pub fn warnings(&self) -> &[String] {
        &self.compiled.warnings
    }

    /// Rules evaluated once at load (configuration-only conditions) instead of per request.
    pub fn folded(&self) -> usize {
        self.folded
    }

    /// Number of rules (chains count once) of the request phases, after folding.
    pub fn rule_count(&self) -> usize {
        self.compiled
            .phases
            .iter()
            .flatten()
            .filter(|i| matches!(i, Item::Rule(_)))
            .count()
    }

    /// Ids of the rules loaded, in evaluation order.
    pub fn rule_ids(&self) -> Vec<u32> {
        self.compiled
            .phases
            .iter()
            .flatten()
            .filter_map(|i| match i {
                Item::Rule(r) => Some(r.id),
                Item::Marker(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
