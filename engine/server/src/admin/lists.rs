//! Block and allow lists edited at run time: `GET|POST /admin/v1/lists`,
//! `DELETE /admin/v1/lists/{id}`.

use actix_web::{web, HttpRequest, HttpResponse};

use super::{authorize, json_body, store};
use crate::auth::Role;
use crate::clock::now_ms;
use crate::control::NewListEntry;
use crate::error::ApiError;
use crate::runtime::Runtime;

pub(super) async fn get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let s = rt.control.store.load().map_err(store)?;
    let now = now_ms();
    let entries: Vec<_> = s
        .lists
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["expired"] = serde_json::json!(e.expires_ms.is_some_and(|t| t <= now));
            v
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "version": s.lists_version,
        "entries": entries,
    })))
}

pub(super) async fn add(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let e: NewListEntry = json_body(&rt, &req, payload).await?;
    let entry = rt.control.add_list_entry(&rt.host(), &who, e)?;
    Ok(HttpResponse::Created().json(entry))
}

pub(super) async fn remove(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let id: u64 = path
        .parse()
        .map_err(|_| ApiError::new(400, "INVALID_FIELD", "the entry id is a number"))?;
    rt.control.remove_list_entry(&rt.host(), &who, id)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "removed": id })))
}
