//! The audit log: `GET /admin/v1/audit`, newest first, filtered and paged backwards.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::{authorize, store};
use crate::auth::Role;
use crate::error::ApiError;
use crate::runtime::Runtime;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    since_ms: Option<i64>,
    /// Entries with a sequence number below this (paging backwards).
    before_seq: Option<u64>,
    limit: Option<usize>,
}

pub(super) async fn query(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let q = web::Query::<AuditQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?
        .into_inner();
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::new(400, "INVALID_QUERY", "limit must be 1–1000"));
    }
    let all = rt.control.store.audit().map_err(store)?;
    let entries: Vec<_> = all
        .into_iter()
        .rev()
        .filter(|e| q.actor.as_ref().is_none_or(|a| &e.actor == a))
        .filter(|e| {
            q.action
                .as_ref()
                .is_none_or(|a| e.action == *a || e.action.starts_with(&format!("{a}.")))
        })
        .filter(|e| q.target.as_ref().is_none_or(|t| &e.target == t))
        .filter(|e| q.since_ms.is_none_or(|s| e.time_ms >= s))
        .filter(|e| q.before_seq.is_none_or(|b| e.seq < b))
        .take(limit)
        .collect();
    let next = (entries.len() == limit)
        .then(|| entries.last().map(|e| e.seq))
        .flatten();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "entries": entries,
        "next_before_seq": next,
    })))
}
