//! The decision log's read side: `GET /admin/v1/decisions/recent` (the in-memory ring),
//! `GET /admin/v1/decisions` (the explorer) and `GET /admin/v1/stats`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::authorize;
use crate::auth::Role;
use crate::error::ApiError;
use crate::runtime::Runtime;

#[derive(Deserialize)]
struct RecentQuery {
    limit: Option<usize>,
}

pub(super) async fn recent(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let q = web::Query::<RecentQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?;
    let limit = q.limit.unwrap_or(100).min(1000);
    Ok(HttpResponse::Ok().json(serde_json::json!({ "decisions": rt.log.recent(limit) })))
}

pub(super) async fn query(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    crate::http::query_endpoint(rt, req, false).await
}

pub(super) async fn stats(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    crate::http::query_endpoint(rt, req, true).await
}
