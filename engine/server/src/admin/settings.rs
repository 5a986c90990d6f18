//! The running settings: `GET /admin/v1/settings` (the configuration without secrets) and
//! `GET|PUT /admin/v1/settings/log-level`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::{authorize, json_body};
use crate::auth::Role;
use crate::error::ApiError;
use crate::runtime::Runtime;

/// The running configuration, without secrets: what the console's settings page shows.
pub(super) async fn get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let mut view = rt.config.settings_view();
    view["log_level"] = crate::runtime::logging::level().into();
    Ok(HttpResponse::Ok().json(view))
}

pub(super) async fn log_level_get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "level": crate::runtime::logging::level() })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogLevel {
    level: String,
}

pub(super) async fn log_level_put(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let l: LogLevel = json_body(&rt, &req, payload).await?;
    let before = crate::runtime::logging::level();
    crate::runtime::logging::set_level(&l.level)
        .map_err(|e| ApiError::new(400, "INVALID_FIELD", format!("level: {e}")))?;
    rt.control.audit(
        &who,
        "settings.log-level",
        "log.level",
        Some(before),
        Some(l.level.clone()),
        serde_json::Value::Null,
    );
    Ok(HttpResponse::Ok().json(serde_json::json!({ "level": l.level })))
}
