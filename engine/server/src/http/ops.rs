//! Operational endpoints: `/v1/time`, `/healthz`, `/readyz`, `/metrics`, `/openapi.json`, and the
//! query endpoint behind the admin API's decision explorer and stats.

use crate::clock::now_ms;
use crate::error::ApiError;
use crate::runtime::Runtime;
use actix_web::{web, HttpRequest, HttpResponse};

pub(super) async fn time() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "server_time_ms": now_ms() }))
}

/// `GET /openapi.json`: the generated OpenAPI 3 document (built once).
pub(super) async fn openapi() -> HttpResponse {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HttpResponse::Ok()
        .content_type("application/json")
        .body(DOC.get_or_init(crate::http::openapi::document).clone())
}

pub(super) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

pub(super) async fn readyz(rt: web::Data<Runtime>) -> HttpResponse {
    match rt.is_ready() {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })),
        Err(why) => HttpResponse::ServiceUnavailable().json(serde_json::json!({ "status": why })),
    }
}

/// `GET /metrics`; with `[server] metrics_token`, only for `Authorization: Bearer <token>`.
pub(super) async fn metrics(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    if let Some(want) = &rt.metrics_token {
        let got = req
            .headers()
            .get("authorization")
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().as_bytes())
            .unwrap_or_default();
        if !crate::auth::ct_eq(want.as_bytes(), got) {
            return Err(ApiError::new(
                401,
                "UNAUTHENTICATED",
                "/metrics needs Authorization: Bearer <server.metrics_token>",
            ));
        }
    }
    rt.refresh_gauges();
    Ok(HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(rt.metrics.encode()))
}

pub(crate) async fn query_endpoint(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    stats: bool,
) -> Result<HttpResponse, ApiError> {
    let f = web::Query::<crate::declog::query::Filter>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?
        .into_inner();
    Ok(HttpResponse::Ok().json(query_filtered(rt, f, stats).await?))
}

/// The decisions (or stats, with `stats`) `f` selects, from ClickHouse or the local log.
pub(crate) async fn query_filtered(
    rt: web::Data<Runtime>,
    f: crate::declog::query::Filter,
    stats: bool,
) -> Result<serde_json::Value, ApiError> {
    let now = now_ms();
    let dl = &rt.config.raw.decision_log;
    let answer = match &dl.clickhouse_url {
        Some(_) => {
            let s = crate::declog::ch_settings(dl);
            if stats {
                crate::declog::query::stats_ch(&s, &f, now).await
            } else {
                crate::declog::query::decisions_ch(&s, &f, now).await
            }
        }
        None => {
            let dir = dl.dir.clone();
            let writer = rt.clone();
            web::block(move || {
                // Every decision already answered is in the files before they are read.
                writer.log.flush();
                if stats {
                    crate::declog::query::stats_local(&dir, &f, now, Some(&writer.log.summary))
                } else {
                    crate::declog::query::decisions_local(&dir, &f, now)
                }
            })
            .await
            .map_err(|e| ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()))?
        }
    };
    match answer {
        Ok(v) => Ok(v),
        Err(crate::declog::query::QueryError::Invalid(m)) => {
            Err(ApiError::new(400, "INVALID_QUERY", m))
        }
        Err(e @ crate::declog::query::QueryError::Unavailable(_)) => {
            Err(ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()))
        }
    }
}
