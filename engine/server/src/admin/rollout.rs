//! Staged rollout: `GET|POST /admin/v1/rollout` (the state; stage a candidate in shadow or
//! canary), `POST …/approve` (four eyes) and `POST …/rollback`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::{authorize, json_body, json_body_or_default, resolve, store};
use crate::auth::Role;
use crate::control::StageRequest;
use crate::error::ApiError;
use crate::runtime::Runtime;

pub(super) fn view(rt: &Runtime, s: &crate::control::ControlState) -> serde_json::Value {
    let live = rt.engine.candidate();
    serde_json::json!({
        "generation": s.generation,
        "stable": s.stable,
        "candidate": s.candidate,
        "stats": live.map(|c| c.stats.snapshot()),
        "policy": rt.control.policy,
        "history": s.history.iter().rev().take(100).collect::<Vec<_>>(),
    })
}

pub(super) async fn get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let s = rt.control.store.load().map_err(store)?;
    Ok(HttpResponse::Ok().json(view(&rt, &s)))
}

pub(super) async fn stage(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let mut r: StageRequest = json_body(&rt, &req, payload).await?;
    r.version = resolve(&rt, &r.version)?;
    let s = rt.control.stage(&rt.host(), &who, r)?;
    Ok(HttpResponse::Ok().json(view(&rt, &s)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    version: String,
}

pub(super) async fn approve(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Approver)?;
    let a: Approve = json_body(&rt, &req, payload).await?;
    let v = resolve(&rt, &a.version)?;
    let s = rt.control.approve(&rt.host(), &who, &v)?;
    Ok(HttpResponse::Ok().json(view(&rt, &s)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Rollback {
    reason: String,
}

pub(super) async fn rollback(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let r: Rollback = json_body_or_default(&rt, &req, payload).await?;
    let reason = if r.reason.is_empty() {
        "manual rollback".to_string()
    } else {
        r.reason.chars().take(1000).collect()
    };
    let s = rt.control.rollback(&rt.host(), &who, &reason)?;
    Ok(HttpResponse::Ok().json(view(&rt, &s)))
}
