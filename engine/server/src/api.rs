//! HTTP API, contract v1: `/v1/decide`, `/v1/decide/batch`, `/v1/time`, `/healthz`, `/readyz`,
//! `/metrics`, and the admin endpoints `/admin/v1/decisions/recent`, `/admin/v1/rulesets/current`
//! and `POST /admin/v1/rulesets` (loopback only until admin auth lands).
//!
//! Errors of the call itself are answered 4xx with `{"error":{"code","message"}}`, never a 5xx.

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use futures_core::Stream as _;
use rampart_core::model::{Reason, ShadowHit};
use rampart_core::{Action, Code, DecideRequest, Verdict};
use serde::{Deserialize, Serialize};

use crate::clock::now_ms;
use crate::declog::{DecisionRecord, RecordedJson};
use crate::runtime::Runtime;

/// An error of the API call itself.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Extra data (e.g. located rule errors), under `error.details`.
    pub details: Option<serde_json::Value>,
    /// Sent as `Retry-After` (seconds, rounded up).
    pub retry_after_ms: Option<i64>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after_ms: None,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_retry_after(mut self, ms: i64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    fn body(&self) -> serde_json::Value {
        let mut e = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.details {
            e["details"] = d.clone();
        }
        serde_json::json!({ "error": e })
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST)
    }
    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.status_code());
        if let Some(ms) = self.retry_after_ms {
            r.insert_header(("retry-after", ((ms.max(0) + 999) / 1000).to_string()));
        }
        r.json(self.body())
    }
}

impl From<rampart_core::RequestError> for ApiError {
    fn from(e: rampart_core::RequestError) -> Self {
        ApiError::new(e.status(), e.code(), e.to_string())
    }
}

/// Maps a JSON parse error to a stable code.
pub(crate) fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let msg = e.to_string();
    if msg.contains("recursion limit") {
        return ApiError::new(
            400,
            "JSON_TOO_DEEP",
            "JSON nesting is deeper than 128 levels",
        );
    }
    match e.classify() {
        Category::Data => ApiError::new(400, "INVALID_FIELD", msg),
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            400,
            "MALFORMED_JSON",
            format!("body is not valid JSON: {msg}"),
        ),
    }
}

/// The answer of `/v1/decide`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecisionOut {
    pub decision_id: String,
    pub action: Action,
    pub code: Code,
    pub status: u16,
    pub tier: Option<String>,
    pub rule: Option<String>,
    pub reasons: Vec<Reason>,
    pub retry_after_ms: Option<u64>,
    pub ruleset: RulesetRef,
    pub shadow: Vec<ShadowHit>,
    pub latency_us: u64,
    pub degraded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_time_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skew_ms: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RulesetRef {
    pub version: String,
    pub arm: String,
}

pub(crate) async fn read_body(
    rt: &Runtime,
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, ApiError> {
    let too_large = || {
        rt.metrics.api_error("BODY_TOO_LARGE");
        ApiError::new(
            413,
            "BODY_TOO_LARGE",
            format!("request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    // Read the chunks here rather than with `to_bytes_limited`, which reserves 32 KiB for every
    // body it cannot size (every request body) and made that allocation a visible cost of each
    // decision. A body that arrives in one chunk is kept as it is, without a copy.
    let mut first: Option<web::Bytes> = None;
    let mut joined: Option<web::BytesMut> = None;
    let mut total = 0usize;
    while let Some(chunk) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut payload).poll_next(cx)).await
    {
        let chunk =
            chunk.map_err(|e| ApiError::new(400, "BAD_BODY", format!("cannot read body: {e}")))?;
        total += chunk.len();
        if total > limit {
            return Err(too_large());
        }
        match (&mut joined, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&chunk),
            (None, None) => first = Some(chunk),
            (None, Some(head)) => {
                let mut buf =
                    web::BytesMut::with_capacity(declared.unwrap_or(0).clamp(total, limit));
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&chunk);
                joined = Some(buf);
            }
        }
    }
    Ok(match joined {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

/// Judges one parsed request, records metrics and the decision log row (which takes the request's
/// strings: it is not needed afterwards).
fn judge(rt: &Runtime, req: DecideRequest, started: Instant) -> Result<DecisionOut, ApiError> {
    let now = now_ms();
    let (verdict, req) = rt.engine.decide_owned(req, now);
    let mut verdict: Verdict = verdict.inspect_err(|e| rt.metrics.api_error(e.code()))?;
    let version = std::mem::take(&mut verdict.ruleset_version);
    let elapsed = started.elapsed();
    let latency_us = elapsed.as_micros() as u64;
    rt.metrics.record(&req.app, &verdict, elapsed.as_secs_f64());
    let decision_id = rt.ids.next(now);
    let log = &rt.config.raw.decision_log;
    let recorded = log
        .record_request
        .then(|| recorded_request(&req, log.record_request_max_bytes))
        .flatten();
    // The caller's `client.user_agent`, else the judged request's own header.
    let header_agent = match req.client.user_agent {
        Some(_) => None,
        None => req.request.header("user-agent").map(str::to_string),
    };
    let DecideRequest {
        app,
        request,
        client,
        user_id,
        ..
    } = req;
    let mut method = request.method;
    method.make_ascii_uppercase();
    rt.log.submit(DecisionRecord {
        time_ms: now,
        decision_id: decision_id.clone(),
        app,
        method,
        route: request.path,
        user: user_id,
        ip: client.ip,
        device_id: client.device_id,
        country: client.country,
        isp: client.isp,
        device_type: client.device_type,
        user_agent: client.user_agent.or(header_agent),
        ja3: client.ja3,
        tier: verdict.tier,
        rule: verdict.rule.clone(),
        action: verdict.action,
        code: verdict.code,
        status: verdict.status,
        reasons: verdict.reasons.clone(),
        shadow: verdict.shadow.clone(),
        ruleset_version: version.clone(),
        arm: verdict.arm.as_str(),
        latency_us,
        degraded: verdict.degraded,
        instance: rt.instance.clone(),
        score: verdict.score,
        request: recorded,
    });
    Ok(DecisionOut {
        decision_id,
        action: verdict.action,
        code: verdict.code,
        status: verdict.status,
        tier: verdict.tier.map(str::to_string),
        rule: verdict.rule,
        reasons: verdict.reasons,
        retry_after_ms: verdict.retry_after_ms,
        ruleset: RulesetRef {
            version,
            arm: verdict.arm.as_str().into(),
        },
        shadow: verdict.shadow,
        latency_us,
        degraded: verdict.degraded,
        server_time_ms: verdict.server_time_ms,
        skew_ms: verdict.skew_ms,
    })
}

/// Headers never recorded: credentials, and the anti-replay headers (useless once judged).
const UNRECORDED_HEADERS: [&str; 10] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "x-signature",
    "x-nonce",
    "x-timestamp",
    "x-csrf-token",
    "x-content-sha256",
];

/// The rule-visible parts of `req` the decision log keeps for backtests (the row has the rest):
/// query, headers without credentials, params, body, device id. Over `max` bytes the body is left
/// out; if it is still over, nothing is recorded.
/// The recorded request as stored in the decision log: borrowed fields serialised straight to
/// text (keys in alphabetical order, as a `serde_json::Map` would give them), without first
/// copying params, body and headers into a JSON tree.
#[derive(serde::Serialize)]
struct Recorded<'a> {
    body: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    body_omitted: bool,
    device_id: &'a Option<String>,
    headers: std::collections::BTreeMap<std::borrow::Cow<'a, str>, &'a str>,
    params: &'a Option<serde_json::Value>,
    query: &'a str,
}

fn recorded_request(req: &DecideRequest, max: usize) -> Option<RecordedJson> {
    let r = &req.request;
    let mut rec = Recorded {
        body: r.body.as_deref(),
        body_omitted: false,
        device_id: &req.client.device_id,
        headers: r
            .headers
            .iter()
            .filter(|(k, _)| !UNRECORDED_HEADERS.iter().any(|u| k.eq_ignore_ascii_case(u)))
            .map(|(k, v)| {
                let k = if k.bytes().any(|b| b.is_ascii_uppercase()) {
                    std::borrow::Cow::Owned(k.to_ascii_lowercase())
                } else {
                    std::borrow::Cow::Borrowed(k.as_str())
                };
                (k, v.as_str())
            })
            .collect(),
        params: &req.params,
        query: &r.query,
    };
    // The recorded object, then params (the only part that nests).
    let depth = 1 + req.params.as_ref().map_or(0, crate::declog::nesting);
    let s = RecordedJson::of(&rec, depth)?;
    if s.as_str().len() <= max {
        return Some(s);
    }
    rec.body = None;
    rec.body_omitted = true;
    let s = RecordedJson::of(&rec, depth)?;
    (s.as_str().len() <= max).then_some(s)
}

async fn decide(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&rt, &req, payload, rt.limits.max_body_bytes).await?;
    let started = Instant::now();
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        rt.metrics.api_error("INVALID_FIELD");
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            "the body must be a JSON object (use /v1/decide/batch for arrays)",
        ));
    }
    let parsed: DecideRequest = serde_json::from_slice(&body).map_err(|e| {
        let e = json_error(e);
        rt.metrics.api_error(e.code);
        e
    })?;
    let out = judge(&rt, parsed, started)?;
    Ok(HttpResponse::Ok().json(out))
}

/// Refuses a request whose headers exceed `[server] max_header_bytes` with `431
/// HEADERS_TOO_LARGE`, before any handler reads them.
pub async fn header_limit(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<
    actix_web::dev::ServiceResponse<actix_web::body::EitherBody<impl actix_web::body::MessageBody>>,
    actix_web::Error,
> {
    if let Some(rt) = req.app_data::<web::Data<Runtime>>() {
        let max = rt.limits.max_header_bytes;
        let size: usize = req
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if size > max {
            rt.metrics.api_error("HEADERS_TOO_LARGE");
            let e = ApiError::new(
                431,
                "HEADERS_TOO_LARGE",
                format!("the request headers take {size} bytes; at most {max} are accepted"),
            );
            return Ok(req.into_response(e.error_response()).map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}

/// The decide request a forward-auth call describes (`rampart_core::forward`).
fn authz_request(req: &HttpRequest) -> Result<DecideRequest, ApiError> {
    let headers: Vec<(&str, &str)> = req
        .headers()
        .iter()
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
        .collect();
    let peer = req.peer_addr().map(|a| a.ip().to_string());
    rampart_core::forward::CheckRequest {
        headers: &headers,
        method: req.method().as_str(),
        path_and_query: req.uri().path_and_query().map_or("/", |p| p.as_str()),
        peer_ip: peer.as_deref(),
    }
    .to_decide()
    .map_err(|e| ApiError::new(400, "INVALID_FIELD", e.to_string()))
}

/// `GET|POST /v1/authz`: forward-auth. 200 to allow; else the decision's status, with the
/// decision in `X-Rampart-*` headers (and the body).
async fn authz(rt: web::Data<Runtime>, req: HttpRequest) -> HttpResponse {
    let started = Instant::now();
    let answer = authz_request(&req)
        .inspect_err(|e| rt.metrics.api_error(e.code))
        .and_then(|d| judge(&rt, d, started));
    match answer {
        Ok(out) => {
            let status = if out.action == rampart_core::Action::Allow {
                200
            } else {
                out.status
            };
            let mut r =
                HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN));
            r.insert_header(("X-Rampart-Decision", out.action.as_str()))
                .insert_header(("X-Rampart-Code", out.code.as_str()))
                .insert_header(("X-Rampart-Status", out.status.to_string()))
                .insert_header(("X-Rampart-Decision-Id", out.decision_id.clone()));
            if let Some(ms) = out.retry_after_ms.filter(|_| status == 429) {
                r.insert_header(("Retry-After", ms.div_ceil(1000).max(1).to_string()));
            }
            r.json(out)
        }
        Err(e) => {
            let mut r = e.error_response();
            if let Ok(v) = actix_web::http::header::HeaderValue::from_str(e.code) {
                r.headers_mut().insert(
                    actix_web::http::header::HeaderName::from_static("x-rampart-code"),
                    v,
                );
            }
            r
        }
    }
}

async fn decide_batch(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&rt, &req, payload, rt.limits.max_batch_body_bytes).await?;
    let items: Vec<Box<serde_json::value::RawValue>> =
        serde_json::from_slice(&body).map_err(|e| {
            let e = match json_error(e) {
                e if e.code == "INVALID_FIELD" => ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "the batch body must be a JSON array of decide requests",
                ),
                e => e,
            };
            rt.metrics.api_error(e.code);
            e
        })?;
    if items.len() > rt.limits.max_batch_items {
        rt.metrics.api_error("BATCH_TOO_LARGE");
        return Err(ApiError::new(
            413,
            "BATCH_TOO_LARGE",
            format!(
                "the batch has {} items; the limit is {}",
                items.len(),
                rt.limits.max_batch_items
            ),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let started = Instant::now();
        let answer = serde_json::from_str::<DecideRequest>(item.get())
            .map_err(json_error)
            .and_then(|r| judge(&rt, r, started));
        out.push(match answer {
            Ok(d) => serde_json::to_value(d).unwrap_or_default(),
            Err(e) => {
                rt.metrics.api_error(e.code);
                e.body()
            }
        });
    }
    Ok(HttpResponse::Ok().json(out))
}

/// What the downstream service did with an allowed request (`POST /v1/outcome`).
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Outcome {
    app: String,
    /// The route (path) the breaker watches; `path` is accepted as a synonym.
    #[serde(alias = "path")]
    route: String,
    /// Status the downstream service answered.
    status: u16,
    latency_ms: u64,
}

/// `POST /v1/outcome`: a caller reports what the downstream service did with an allowed request,
/// feeding the route's circuit breaker. Accepts one outcome or an array of them.
async fn outcome(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&rt, &req, payload, rt.limits.max_batch_body_bytes).await?;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(json_error)?;
    let items: Vec<Outcome> = match value {
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
    for o in &items {
        let key = rampart_core::store::breaker::breaker_key(&o.app, &o.route);
        rt.rule_state
            .breakers
            .record(&key, now, o.status, o.latency_ms);
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({ "recorded": items.len() })))
}

async fn time() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "server_time_ms": now_ms() }))
}

/// `GET /openapi.json`: the generated OpenAPI 3 document (built once).
async fn openapi() -> HttpResponse {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HttpResponse::Ok()
        .content_type("application/json")
        .body(DOC.get_or_init(crate::openapi::document).clone())
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(rt: web::Data<Runtime>) -> HttpResponse {
    match rt.is_ready() {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })),
        Err(why) => HttpResponse::ServiceUnavailable().json(serde_json::json!({ "status": why })),
    }
}

async fn metrics(rt: web::Data<Runtime>) -> HttpResponse {
    rt.refresh_gauges();
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(rt.metrics.encode())
}

pub(crate) async fn query_endpoint(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    stats: bool,
) -> Result<HttpResponse, ApiError> {
    let f = web::Query::<crate::query::Filter>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?
        .into_inner();
    let now = now_ms();
    let dl = &rt.config.raw.decision_log;
    let answer = match &dl.clickhouse_url {
        Some(_) => {
            let s = crate::declog::ch_settings(dl);
            if stats {
                crate::query::stats_ch(&s, &f, now).await
            } else {
                crate::query::decisions_ch(&s, &f, now).await
            }
        }
        None => {
            let dir = dl.dir.clone();
            let writer = rt.clone();
            web::block(move || {
                // Every decision already answered is in the files before they are read.
                writer.log.flush();
                if stats {
                    crate::query::stats_local(&dir, &f, now)
                } else {
                    crate::query::decisions_local(&dir, &f, now)
                }
            })
            .await
            .map_err(|e| ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()))?
        }
    };
    match answer {
        Ok(v) => Ok(HttpResponse::Ok().json(v)),
        Err(crate::query::QueryError::Invalid(m)) => Err(ApiError::new(400, "INVALID_QUERY", m)),
        Err(e @ crate::query::QueryError::Unavailable(_)) => {
            Err(ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()))
        }
    }
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        404,
        "NOT_FOUND",
        format!("no endpoint {} {}", req.method(), req.path()),
    )
    .error_response()
}

pub(crate) async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        405,
        "METHOD_NOT_ALLOWED",
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}

fn query_error(err: actix_web::error::QueryPayloadError, _req: &HttpRequest) -> actix_web::Error {
    ApiError::new(400, "INVALID_FIELD", format!("bad query string: {err}")).into()
}

fn get_only(path: &str, route: actix_web::Route) -> actix_web::Resource {
    web::resource(path)
        .route(route)
        .default_service(web::to(method_not_allowed))
}

/// Registers every route on an actix `App`.
pub fn configure(rt: Arc<Runtime>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::from(rt))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .service(
                web::resource("/v1/decide")
                    .route(web::post().to(decide))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/v1/decide/batch")
                    .route(web::post().to(decide_batch))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/v1/authz")
                    .route(web::get().to(authz))
                    .route(web::post().to(authz))
                    .route(web::put().to(authz))
                    .route(web::patch().to(authz))
                    .route(web::delete().to(authz))
                    .route(web::head().to(authz))
                    .default_service(web::to(method_not_allowed)),
            )
            // Envoy ext_authz (HTTP service) appends the original path to the configured prefix.
            .service(web::resource("/v1/authz/{tail:.*}").to(authz))
            .service(
                web::resource("/v1/outcome")
                    .route(web::post().to(outcome))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/v1/time")
                    .route(web::get().to(time))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(get_only("/healthz", web::get().to(healthz)))
            .service(get_only("/readyz", web::get().to(readyz)))
            .service(get_only("/metrics", web::get().to(metrics)))
            .service(get_only("/openapi.json", web::get().to(openapi)))
            .configure(crate::admin::configure)
            .configure(crate::console::configure)
            .default_service(web::to(not_found));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn request(body: &str) -> DecideRequest {
        serde_json::from_value(json!({
            "app": "shop",
            "request": {
                "method": "POST",
                "path": "/api/cart",
                "query": "a=1&b=\"x\"",
                "headers": {
                    "User-Agent": "curl/8",
                    "Cookie": "session=secret",
                    "X-Signature": "sig",
                    "Content-Type": "application/json"
                },
                "body": body
            },
            "client": { "ip": "203.0.113.9", "device_id": "dev-1" },
            "params": { "sku": "A-1", "qty": 2, "note": "line\nbreak" }
        }))
        .unwrap()
    }

    #[test]
    fn the_recorded_request_keeps_what_backtests_need_and_no_credentials() {
        let r = request("{\"sku\":\"A-1\"}");
        let rec: Value =
            serde_json::from_str(recorded_request(&r, 4096).unwrap().as_str()).unwrap();
        assert_eq!(
            rec,
            json!({
                "body": "{\"sku\":\"A-1\"}",
                "device_id": "dev-1",
                "headers": { "user-agent": "curl/8", "content-type": "application/json" },
                "params": { "sku": "A-1", "qty": 2, "note": "line\nbreak" },
                "query": "a=1&b=\"x\""
            })
        );
        // Too long with the body: the body goes, and says so; too long without it: nothing.
        let long = request(&"x".repeat(5000));
        let rec: Value =
            serde_json::from_str(recorded_request(&long, 4096).unwrap().as_str()).unwrap();
        assert_eq!(rec["body"], Value::Null);
        assert_eq!(rec["body_omitted"], true);
        assert_eq!(rec["params"]["sku"], "A-1");
        assert!(recorded_request(&long, 100).is_none());
    }
}
