//! `POST /v1/outcome`: what the upstream answered, fed to the circuit breakers.

use super::body::read_body;
use crate::clock::now_ms;
use crate::error::{json_error, ApiError};
use crate::runtime::Runtime;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

/// What the downstream service did with an allowed request (`POST /v1/outcome`).
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Outcome {
    pub(super) app: String,
    /// The route (path) the breaker watches; `path` is accepted as a synonym.
    #[serde(alias = "path")]
    pub(super) route: String,
    /// Status the downstream service answered.
    pub(super) status: u16,
    pub(super) latency_ms: u64,
}

/// `POST /v1/outcome`: a caller reports what the downstream service did with an allowed request,
/// feeding the route's circuit breaker. Accepts one outcome or an array of them.
pub(super) async fn outcome(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&rt, &req, payload, rt.limits.max_batch_body_bytes).await?;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(json_error)?;
    let mut items: Vec<Outcome> = match value {
        serde_json::Value::Array(_) => serde_json::from_value(value),
        other => serde_json::from_value(other).map(|o| vec![o]),
    }
    .map_err(|e| ApiError::new(400, "INVALID_FIELD", e.to_string()))?;
    let now = now_ms();
    for o in &items {
        if rt.engine.app(&o.app).is_none() {
            return Err(ApiError::new(
                404,
                "UNKNOWN_APP",
                format!("unknown app {:?}", o.app),
            ));
        }
        if !(100..=599).contains(&o.status) {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                "status must be an HTTP status (100–599)",
            ));
        }
    }
    for o in &mut items {
        // The breaker watches the normal form of the route, as the decision path reads it.
        match rampart_core::path::normalize_path(&o.route) {
            Ok(std::borrow::Cow::Owned(p)) => o.route = p,
            Ok(std::borrow::Cow::Borrowed(_)) => {}
            Err(e) => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    e.to_string().replace("request.path", "route"),
                ))
            }
        }
    }
    for o in &items {
        let key = rampart_core::store::breaker::breaker_key(&o.app, &o.route);
        rt.rule_state
            .breakers
            .record(&key, now, o.status, o.latency_ms);
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({ "recorded": items.len() })))
}
