//! Backtests: replay recorded decisions through a candidate rule set and report what would change.
//!
//! Each recorded decision carries the rule-visible parts of its request (see the decision log's
//! `request` column). The candidate judges them oldest first, at their recorded time, in a fresh
//! world (its counters, limits and claims start empty, as the caller compiles it against new
//! stores). Only decisions the rules made — refused by a rule tier, or allowed — are compared:
//! a request stopped by the anti-replay core (signature, window, nonce, fingerprint) or by a
//! run-time list would be stopped there again whatever the rules say.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Action, DecideRequest};
use crate::rules::{Req, RuleSet};

/// One recorded decision and its request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub decision_id: String,
    pub time_ms: i64,
    /// `None` when the log did not record the request (then the row is not replayed).
    pub request: Option<DecideRequest>,
    pub action: Action,
    pub code: String,
    pub tier: Option<String>,
    pub rule: Option<String>,
}

/// An outcome as `action code tier/rule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub action: Action,
    pub code: String,
    /// `tier/rule`, or `None` when nothing refused.
    pub rule: Option<String>,
}

impl Outcome {
    fn summary(&self) -> String {
        match &self.rule {
            Some(r) => format!("{} {} {r}", self.action.as_str(), self.code),
            None => format!("{} {}", self.action.as_str(), self.code),
        }
    }
}

/// A decision the candidate would change.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    pub decision_id: String,
    pub time_ms: i64,
    pub route: String,
    pub before: String,
    pub after: String,
}

/// Per rule: decisions it would now make, and recorded decisions it would no longer make.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RuleChange {
    pub gains: u64,
    pub losses: u64,
}

/// What a backtest found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub version: String,
    /// Recorded decisions read.
    pub rows: u64,
    /// Replayed through the candidate.
    pub replayed: u64,
    /// Stopped before the rules (anti-replay core, lists, store failures): not comparable.
    pub not_rules: u64,
    /// Without a recorded request.
    pub unrecorded: u64,
    /// Replayed decisions whose outcome (action, code, rule) would change.
    pub changed: u64,
    /// `before → after` actions of the changed decisions.
    pub by_action: BTreeMap<String, u64>,
    pub by_rule: BTreeMap<String, RuleChange>,
    /// Rule failures during the replay.
    pub rule_errors: u64,
    pub examples: Vec<Example>,
}

/// Whether a recorded decision was made by the rules (comparable) or before them.
fn made_by_rules(r: &Recorded) -> bool {
    match (r.tier.as_deref(), r.rule.as_deref()) {
        // Run-time lists act at the edge step but are not part of a rule set.
        (Some("edge"), Some("blocklist")) | (None, Some("allowlist")) => false,
        (Some("edge" | "gateway" | "business"), _) => r.code != "STORE_UNAVAILABLE",
        _ => r.code == "OK",
    }
}

/// The rule set's outcome for one request.
fn judge(set: &RuleSet, req: &DecideRequest, time_ms: i64, errors: &mut u64) -> Outcome {
    let (v, e) = set.judge(&Req::from_request(req, time_ms));
    *errors += e;
    match v {
        Some(v) => Outcome {
            action: v.action,
            code: v.code.as_str().to_string(),
            rule: v
                .tier
                .map(|t| format!("{t}/{}", v.rule.unwrap_or_default())),
        },
        None => Outcome {
            action: Action::Allow,
            code: "OK".into(),
            rule: None,
        },
    }
}

/// Replays `rows` (oldest first) through `set`; keeps at most `max_examples` examples.
pub fn backtest(set: &RuleSet, rows: &[Recorded], max_examples: usize) -> Report {
    replay(set, rows, max_examples, |r, _, _| Outcome {
        action: r.action,
        code: r.code.clone(),
        rule: match (&r.tier, &r.rule) {
            (Some(t), Some(rule)) if !t.is_empty() => Some(format!("{t}/{rule}")),
            _ => None,
        },
    })
}

/// Replays `rows` through both `base` and `head` (each compiled against fresh stores of its own)
/// and reports what `head` decides differently from `base`: the pipeline's diff over recorded
/// traffic. `rule_errors` counts both sets' failures. Rows the rules did not decide when
/// recorded are skipped as in [`backtest`].
pub fn compare(base: &RuleSet, head: &RuleSet, rows: &[Recorded], max_examples: usize) -> Report {
    replay(head, rows, max_examples, |r, req, errors| {
        judge(base, req, r.time_ms, errors)
    })
}

fn replay(
    set: &RuleSet,
    rows: &[Recorded],
    max_examples: usize,
    mut before: impl FnMut(&Recorded, &DecideRequest, &mut u64) -> Outcome,
) -> Report {
    let mut rep = Report {
        version: set.version().to_string(),
        ..Report::default()
    };
    for r in rows {
        rep.rows += 1;
        let Some(req) = &r.request else {
            rep.unrecorded += 1;
            continue;
        };
        if !made_by_rules(r) {
            rep.not_rules += 1;
            continue;
        }
        rep.replayed += 1;
        let before = before(r, req, &mut rep.rule_errors);
        let after = judge(set, req, r.time_ms, &mut rep.rule_errors);
        if before == after {
            continue;
        }
        rep.changed += 1;
        *rep.by_action
            .entry(format!(
                "{} → {}",
                before.action.as_str(),
                after.action.as_str()
            ))
            .or_default() += 1;
        if before.rule != after.rule {
            if let Some(g) = &after.rule {
                rep.by_rule.entry(g.clone()).or_default().gains += 1;
            }
            if let Some(l) = &before.rule {
                rep.by_rule.entry(l.clone()).or_default().losses += 1;
            }
        }
        if rep.examples.len() < max_examples {
            rep.examples.push(Example {
                decision_id: r.decision_id.clone(),
                time_ms: r.time_ms,
                route: req.request.path.clone(),
                before: before.summary(),
                after: after.summary(),
            });
        }
    }
    rep
}

impl Recorded {
    /// A decision as the decision explorer returns it (`GET /admin/v1/decisions` items, one per
    /// line in a recorded-traffic file): the flat row plus its `request` object.
    pub fn from_row(row: &serde_json::Value) -> Recorded {
        let s = |k: &str| {
            row[k]
                .as_str()
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let request = row.get("request").filter(|r| r.is_object()).and_then(|r| {
            serde_json::from_value(serde_json::json!({
                "app": row["app"],
                "request": {
                    "method": row["method"],
                    "path": row["route"],
                    "query": r["query"].as_str().unwrap_or(""),
                    "headers": r["headers"],
                    "body": r["body"],
                },
                "client": {
                    "ip": s("ip"), "device_id": r["device_id"], "ja3": s("ja3"),
                    "country": s("country"), "isp": s("isp"), "device_type": s("device_type"),
                    "user_agent": s("user_agent"),
                },
                "user_id": s("user"),
                "params": r["params"],
            }))
            .ok()
        });
        Recorded {
            decision_id: s("decision_id").unwrap_or_default(),
            time_ms: row["time_ms"].as_i64().unwrap_or(0),
            request,
            action: serde_json::from_value(row["action"].clone()).unwrap_or(Action::Allow),
            code: s("code").unwrap_or_default(),
            tier: s("tier"),
            rule: s("rule"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{RuleSettings, RuleState, Source};

    fn set(rules: &[(&str, &str)]) -> RuleSet {
        let sources: Vec<Source> = rules
            .iter()
            .map(|(p, body)| Source {
                path: p.to_string(),
                text: format!(
                    "//! name: {}\n//! priority: 10\n//! owner: t\n//! description: d\n{body}\n",
                    p.trim_end_matches(".rhai").rsplit('/').next().unwrap()
                ),
            })
            .collect();
        RuleSet::compile(&sources, RuleSettings::default(), &RuleState::local(1000)).unwrap()
    }

    fn row(id: &str, path: &str, code: &str, tier: Option<&str>, rule: Option<&str>) -> Recorded {
        let req: DecideRequest = serde_json::from_value(serde_json::json!({
            "app": "a", "request": {"method": "GET", "path": path}
        }))
        .unwrap();
        Recorded {
            decision_id: id.into(),
            time_ms: 1_000,
            request: Some(req),
            action: if code == "OK" {
                Action::Allow
            } else {
                Action::Deny
            },
            code: code.into(),
            tier: tier.map(String::from),
            rule: rule.map(String::from),
        }
    }

    #[test]
    fn counts_changes_by_action_and_rule_and_skips_what_rules_did_not_decide() {
        let s = set(&[(
            "edge/admin.rhai",
            "if req.path.starts_with(\"/admin\") { deny(\"no\") }",
        )]);
        let mut unrecorded = row("5", "/x", "OK", None, None);
        unrecorded.request = None;
        let rows = vec![
            row("1", "/admin/a", "OK", None, None),
            row("2", "/shop", "OK", None, None),
            row("3", "/shop", "RULE_DENY", Some("edge"), Some("old")),
            row("4", "/admin/b", "REPLAY_DUPLICATE", None, Some("nonce")),
            unrecorded,
            row(
                "6",
                "/admin/c",
                "RULE_DENY",
                Some("edge"),
                Some("blocklist"),
            ),
        ];
        let r = backtest(&s, &rows, 10);
        assert_eq!(
            (r.rows, r.replayed, r.not_rules, r.unrecorded),
            (6, 3, 2, 1)
        );
        assert_eq!(r.changed, 2);
        assert_eq!(r.by_action["allow → deny"], 1);
        assert_eq!(r.by_action["deny → allow"], 1);
        assert_eq!(
            r.by_rule["edge/admin"],
            RuleChange {
                gains: 1,
                losses: 0
            }
        );
        assert_eq!(
            r.by_rule["edge/old"],
            RuleChange {
                gains: 0,
                losses: 1
            }
        );
        assert_eq!(r.examples[0].decision_id, "1");
        assert_eq!(r.examples[0].after, "deny RULE_DENY edge/admin");
    }
}
