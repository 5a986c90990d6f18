//! The audit log's entries, and how a change records one.

use serde::{Deserialize, Serialize};

use super::Control;
use crate::auth::{Principal, Role};
use crate::clock::now_ms;

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub seq: u64,
    pub time_ms: i64,
    pub actor: String,
    pub role: Role,
    pub via: String,
    /// e.g. `ruleset.upload`, `rollout.stage`, `rollout.approve`, `rollout.rollback`,
    /// `rollout.auto-rollback`, `ruleset.activate`, `list.add`, `list.remove`, `key.add`,
    /// `key.approve`, `key.retire`, `login`, `logout`, `settings.log-level`.
    pub action: String,
    pub target: String,
    /// Hash of what the action replaced (e.g. the stable version before), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Hash of what the action put in place, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// The audit entry a change produces.
pub struct Audit {
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub detail: serde_json::Value,
}

impl Audit {
    /// An import that is recorded but not made stable (a new built-in set while another
    /// version is stable).
    pub(super) fn none() -> Audit {
        Audit {
            action: "ruleset.import-skipped".into(),
            target: String::new(),
            before: None,
            after: None,
            detail: serde_json::Value::Null,
        }
    }
}

impl Control {
    /// Records an audit entry (a failure to record is logged: the change itself is done).
    pub fn audit(
        &self,
        who: &Principal,
        action: &str,
        target: &str,
        before: Option<String>,
        after: Option<String>,
        detail: serde_json::Value,
    ) {
        let mut e = AuditEntry {
            seq: 0,
            time_ms: now_ms(),
            actor: who.name.clone(),
            role: who.role,
            via: format!("{:?}", who.via).to_ascii_lowercase(),
            action: action.into(),
            target: target.into(),
            before,
            after,
            detail,
        };
        if let Err(err) = self.store.append_audit(&mut e) {
            tracing::error!(%err, action, actor = %who.name, "cannot append to the audit log");
        }
    }
}
