//! `[rules]`: where the rule set comes from, reloads, per-tier error defaults, score thresholds and
//! the counting helpers' bounds.

use std::path::PathBuf;

use rampart_core::policy::FailPolicy;
use serde::Deserialize;

use super::state::OnStoreError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulesConfig {
    /// Directory of the rule set (`edge/`, `gateway/`, `business/`, `lists/`). Absent = the
    /// built-in default set, or no rules when `defaults = false`.
    pub dir: Option<PathBuf>,
    /// Without `dir`: run the default rule set built into the binary (the repository's `rules/`).
    pub defaults: bool,
    /// Samples the regression endpoint uses; absent = `<dir>/samples`, else the built-in ones.
    pub samples_dir: Option<PathBuf>,
    /// Reputation (fed by gateway/business refusals and replays) is summed over this window.
    pub reputation_window_ms: i64,
    /// Watch `dir` and swap in a new set when its files change (a failed compile keeps the old).
    pub reload: bool,
    pub reload_interval_ms: u64,
    pub edge_on_error: OnStoreError,
    pub gateway_on_error: OnStoreError,
    pub business_on_error: OnStoreError,
    pub challenge_score: i64,
    pub review_score: i64,
    pub deny_score: i64,
    /// Cap on keys held by `rate_limit` and `count` (past it those helpers fail, and the rule's
    /// tier default applies).
    pub max_limiter_keys: usize,
    /// `contains_any` answers remembered per worker thread and list (a full cache starts over).
    pub list_cache_entries: usize,
    /// Circuit breakers kept (one per app and path a `circuit_open` rule watched).
    pub max_breakers: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        let d = rampart_core::rules::RuleSettings::default();
        RulesConfig {
            dir: None,
            defaults: true,
            samples_dir: None,
            reputation_window_ms: 3_600_000,
            reload: true,
            reload_interval_ms: 1000,
            edge_on_error: OnStoreError::Allow,
            gateway_on_error: OnStoreError::Allow,
            business_on_error: OnStoreError::Allow,
            challenge_score: d.challenge_score,
            review_score: d.review_score,
            deny_score: d.deny_score,
            max_limiter_keys: 1_000_000,
            list_cache_entries: rampart_core::memo::DEFAULT_BOUND,
            max_breakers: rampart_core::store::breaker::DEFAULT_MAX_BREAKERS,
        }
    }
}

impl RulesConfig {
    pub fn settings(&self) -> rampart_core::rules::RuleSettings {
        let p = |o: OnStoreError| match o {
            OnStoreError::Deny => FailPolicy::Deny,
            OnStoreError::Allow => FailPolicy::Allow,
        };
        rampart_core::rules::RuleSettings {
            on_error: [
                p(self.edge_on_error),
                p(self.gateway_on_error),
                p(self.business_on_error),
            ],
            challenge_score: self.challenge_score,
            review_score: self.review_score,
            deny_score: self.deny_score,
        }
    }
}

impl RulesConfig {
    /// Checks `[rules]`; every problem goes into `errs`.
    pub(super) fn check(&self, errs: &mut Vec<String>) {
        if let Some(dir) = &self.dir {
            if !dir.is_dir() {
                errs.push(format!("rules.dir {} is not a directory", dir.display()));
            }
        }
        let r = self;
        if r.challenge_score < 1 {
            errs.push(
                "rules.challenge_score must be at least 1 (0 would challenge every request)".into(),
            );
        }
        if !(r.challenge_score <= r.review_score && r.review_score <= r.deny_score) {
            errs.push("rules: challenge_score ≤ review_score ≤ deny_score is required".into());
        }
        if r.reputation_window_ms <= 0 {
            errs.push("rules.reputation_window_ms must be positive".into());
        }
        if !(1..=1_000_000).contains(&r.max_breakers) {
            errs.push("rules.max_breakers must be 1 to 1000000".into());
        }
        if !(1..=1_000_000).contains(&r.list_cache_entries) {
            errs.push("rules.list_cache_entries must be 1 to 1000000".into());
        }
        if r.reload_interval_ms < 100 {
            errs.push("rules.reload_interval_ms must be at least 100".into());
        }
    }
}
