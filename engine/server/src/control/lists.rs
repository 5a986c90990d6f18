//! Block and allow list entries edited at run time: adding (with an expiry or a time to live) and
//! removing them, each audited with a content hash of the lists before and after.

use rampart_core::rollout::{ListAction, ListKind};
use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::{conflict, Control, Host};
use crate::auth::Principal;
use crate::clock::now_ms;
use crate::error::ApiError;

/// A block or allow list entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListEntry {
    pub id: u64,
    pub list: ListAction,
    pub kind: ListKind,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    #[serde(default)]
    pub note: String,
    pub by: String,
    pub created_ms: i64,
}

/// `POST /admin/v1/lists`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewListEntry {
    pub list: ListAction,
    pub kind: ListKind,
    pub value: String,
    #[serde(default)]
    pub expires_ms: Option<i64>,
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    #[serde(default)]
    pub note: String,
}

impl Control {
    /// Adds a block or allow list entry.
    pub fn add_list_entry(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        e: NewListEntry,
    ) -> Result<ListEntry, ApiError> {
        e.kind
            .validate(&e.value)
            .map_err(|m| ApiError::new(400, "INVALID_FIELD", format!("value: {m}")))?;
        let now = now_ms();
        let expires_ms = match (e.expires_ms, e.ttl_ms) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "give expires_ms or ttl_ms, not both",
                ))
            }
            (Some(t), None) if t <= now => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "expires_ms is in the past",
                ))
            }
            (None, Some(t)) if t <= 0 => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "ttl_ms must be positive",
                ))
            }
            (Some(t), None) => Some(t),
            (None, Some(t)) => Some(now.saturating_add(t)),
            (None, None) => None,
        };
        if e.note.len() > 1000 {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                "note is over 1000 bytes",
            ));
        }
        self.mutate(rt, who, |s| {
            if s.lists.len() >= 100_000 {
                return Err(conflict("LIST_FULL", "the lists hold 100,000 entries"));
            }
            s.next_list_id += 1;
            s.lists_version += 1;
            let entry = ListEntry {
                id: s.next_list_id,
                list: e.list,
                kind: e.kind,
                value: e.value.clone(),
                expires_ms,
                note: e.note.clone(),
                by: who.name.clone(),
                created_ms: now,
            };
            s.lists.push(entry.clone());
            let h = list_hash(&s.lists);
            Ok((
                Audit {
                    action: "list.add".into(),
                    target: format!("{}:{}", list_name(e.list), e.kind.as_str()),
                    before: Some(list_hash(&s.lists[..s.lists.len() - 1])),
                    after: Some(h),
                    detail: serde_json::to_value(&entry).unwrap_or_default(),
                },
                entry,
            ))
        })
    }

    pub fn remove_list_entry(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        id: u64,
    ) -> Result<(), ApiError> {
        self.mutate(rt, who, |s| {
            let before = list_hash(&s.lists);
            let Some(i) = s.lists.iter().position(|e| e.id == id) else {
                return Err(ApiError::new(
                    404,
                    "NOT_FOUND",
                    format!("no list entry {id}"),
                ));
            };
            let entry = s.lists.remove(i);
            s.lists_version += 1;
            Ok((
                Audit {
                    action: "list.remove".into(),
                    target: format!("{}:{}", list_name(entry.list), entry.kind.as_str()),
                    before: Some(before),
                    after: Some(list_hash(&s.lists)),
                    detail: serde_json::to_value(&entry).unwrap_or_default(),
                },
                (),
            ))
        })
    }
}

fn list_name(a: ListAction) -> &'static str {
    match a {
        ListAction::Block => "block",
        ListAction::Allow => "allow",
    }
}

/// A short content hash of list entries (for the audit log's before/after).
fn list_hash(entries: &[ListEntry]) -> String {
    let body = serde_json::to_vec(entries).unwrap_or_default();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&body))
}
