//! `POST /v1/outcome`: what the upstream answered, fed to the circuit breakers.

use super::body::read_body;
use crate::clock::now_ms;
use crate::config::OutcomeAuth;
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
    if rt.config.raw.server.outcome_auth == OutcomeAuth::Signed {
        authenticate(&rt, &req, &items, &body, now)?;
    }
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

/// A signed report (`[server] outcome_auth = "signed"`, the default): the app signs the call as
/// it signs a request — the canonical string of `POST /v1/outcome` (its query, the body's
/// SHA-256), with `x-timestamp`, `x-nonce`, `x-signature` and optionally `x-key-id` — so only a
/// holder of the app's key can feed its breakers, and a captured report cannot be sent again.
/// One report covers one app.
fn authenticate(
    rt: &Runtime,
    req: &HttpRequest,
    items: &[Outcome],
    body: &[u8],
    now: i64,
) -> Result<(), ApiError> {
    let Some(first) = items.first() else {
        return Ok(());
    };
    if items.iter().any(|o| o.app != first.app) {
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            "a signed report covers one app: send one report per app",
        ));
    }
    let mut headers = serde_json::Map::new();
    for name in ["x-timestamp", "x-nonce", "x-signature", "x-key-id"] {
        let mut values = req.headers().get_all(name);
        if let Some(v) = values.next() {
            if values.next().is_some() {
                return Err(ApiError::new(
                    400,
                    "DUPLICATE_HEADER",
                    format!("{name} appears more than once"),
                ));
            }
            let v = v.to_str().map_err(|_| {
                ApiError::new(400, "INVALID_FIELD", format!("{name} is not readable text"))
            })?;
            headers.insert(name.into(), v.into());
        }
    }
    let call: rampart_core::DecideRequest = serde_json::from_value(serde_json::json!({
        "app": first.app,
        "request": {
            "method": "POST",
            "path": req.path(),
            "query": req.query_string(),
            "headers": headers,
        }
    }))
    .map_err(|e| ApiError::new(400, "INVALID_FIELD", e.to_string()))?;
    match rt.engine.authenticate_call(&call, body, now)? {
        Ok(_key) => Ok(()),
        Err(v) => {
            rt.metrics.outcome_refused.inc();
            let msg = v
                .reasons
                .first()
                .map(|r| r.message.clone())
                .unwrap_or_default();
            Err(ApiError::new(v.status, v.code.as_str(), msg))
        }
    }
}
