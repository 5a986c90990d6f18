//! An app's signing keys: `GET|POST /admin/v1/apps/{app}/keys` (list; add, the generated secret
//! shown once), `DELETE /admin/v1/apps/{app}/keys/{id}` (or `DELETE …/keys?id=…`: retire) and
//! `POST /admin/v1/apps/{app}/keys/{id}/approve` (four eyes, with `[admin] key_approval`). All
//! need the admin role; no answer ever holds a stored secret.

use actix_web::{web, HttpRequest, HttpResponse};
use rampart_core::replay::keys::Validity;
use serde::Deserialize;
use serde_json::json;

use super::{authorize, json_body_or_default, store};
use crate::auth::Role;
use crate::clock::now_ms;
use crate::control::{KeyEntry, NewKey};
use crate::error::ApiError;
use crate::runtime::Runtime;

fn state_name(v: Validity) -> &'static str {
    match v {
        Validity::Active => "active",
        Validity::NotYet(_) => "not_yet_valid",
        Validity::Expired(_) => "expired",
    }
}

pub(super) async fn list(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Admin)?;
    let app = path.into_inner();
    let ring = rt
        .engine
        .keyring(&app)
        .ok_or_else(|| ApiError::new(404, "UNKNOWN_APP", format!("unknown app {app:?}")))?;
    let state = rt.control.store.load().map_err(store)?;
    let entries: Vec<&KeyEntry> = state.keys.iter().filter(|e| e.app == app).collect();
    let entry = |id: &str| entries.iter().find(|e| e.id == id);
    let now = now_ms();
    let mut keys: Vec<serde_json::Value> = ring
        .keys()
        .iter()
        .map(|k| {
            let e = entry(k.id());
            json!({
                "id": k.id(),
                "source": e.map_or("config", |e| e.source.as_str()),
                "state": state_name(k.validity(now)),
                "not_before_ms": k.not_before_ms(),
                "not_after_ms": k.not_after_ms(),
                "created_ms": e.map(|e| e.created_ms),
                "by": e.map(|e| e.by.as_str()),
                "approved_by": e.and_then(|e| e.approved_by.as_deref()),
                "uses": k.usage().uses(),
                "last_used_ms": k.usage().last_used_ms(),
            })
        })
        .collect();
    // Pending keys (waiting for a second admin) are not in the keyring yet.
    keys.extend(
        entries
            .iter()
            .filter(|e| e.pending && e.retired_ms.is_none())
            .map(|e| {
                json!({
                    "id": e.id, "source": e.source, "state": "pending",
                    "not_before_ms": e.not_before_ms, "not_after_ms": e.not_after_ms,
                    "created_ms": e.created_ms, "by": e.by, "approved_by": null,
                    "uses": 0, "last_used_ms": null,
                })
            }),
    );
    let mut gone: Vec<&&KeyEntry> = entries.iter().filter(|e| e.retired_ms.is_some()).collect();
    gone.sort_by_key(|e| e.retired_ms);
    let retired: Vec<serde_json::Value> = gone
        .iter()
        .map(|e| {
            json!({
                "id": e.id, "source": e.source, "retired_ms": e.retired_ms,
                "retired_by": e.retired_by,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({
        "app": app,
        "keys": keys,
        "retired": retired,
        "key_approval": rt.config.raw.admin.key_approval,
        "max_keys": rampart_core::replay::keys::MAX_KEYS,
        "instance": &*rt.instance,
    })))
}

pub(super) async fn add(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let k: NewKey = json_body_or_default(&rt, &req, payload).await?;
    let created = rt.control.add_key(&rt.host(), &who, &path, k)?;
    // The secret is in this answer only: no cache may keep it.
    Ok(HttpResponse::Created()
        .insert_header(("cache-control", "no-store"))
        .json(created))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct KeyRef {
    id: Option<String>,
}

/// `DELETE /admin/v1/apps/{app}/keys/{id}`.
pub(super) async fn retire(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let (app, id) = path.into_inner();
    let r = rt.control.retire_key(&rt.host(), &who, &app, &id)?;
    Ok(HttpResponse::Ok().json(r))
}

/// `DELETE /admin/v1/apps/{app}/keys?id=…` (or the id in a JSON body).
pub(super) async fn retire_by_query(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let query = web::Query::<KeyRef>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?;
    let body: KeyRef = json_body_or_default(&rt, &req, payload).await?;
    let id = query.into_inner().id.or(body.id).ok_or_else(|| {
        ApiError::new(
            400,
            "INVALID_FIELD",
            "name the key: DELETE /admin/v1/apps/{app}/keys/{id}, ?id=…, or {\"id\": …}",
        )
    })?;
    let r = rt.control.retire_key(&rt.host(), &who, &path, &id)?;
    Ok(HttpResponse::Ok().json(r))
}

pub(super) async fn approve(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let (app, id) = path.into_inner();
    rt.control.approve_key(&rt.host(), &who, &app, &id)?;
    Ok(HttpResponse::Ok().json(json!({ "app": app, "approved": id })))
}
