//! `POST /v1/decide` and `POST /v1/decide/batch`: a request judged by the engine, its answer, and
//! the record the decision log keeps of it.

use super::body::read_body;
use crate::clock::now_ms;
use crate::declog::{DecisionRecord, RecordedJson};
use crate::error::{json_error, ApiError};
use crate::runtime::Runtime;
use actix_web::{web, HttpRequest, HttpResponse};
use rampart_core::model::{Reason, ShadowHit};
use rampart_core::{Action, Code, DecideRequest, Verdict};
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
    /// The signing key the request's signature matched (absent when the signature step refused
    /// the request or was not reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// With a `challenge` answer: the proof of work that passes it (contract v1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub challenge: Option<serde_json::Value>,
    /// After a verified solution: the clearance later requests carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub clearance: Option<serde_json::Value>,
    /// The request carried a valid solution or clearance (`req.cleared`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleared: bool,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RulesetRef {
    pub version: String,
    pub arm: String,
}

/// Judges one parsed request, records metrics and the decision log row (which takes the request's
/// strings: it is not needed afterwards).
/// [`judge`] where the decision may wait on Redis: on a pool thread apart from the HTTP workers
/// once a permit is free (`[state] decision_threads`), so a slow Redis parks decisions, never the
/// workers; on the calling worker otherwise. `started` is taken before the wait, so a decision's
/// latency includes it.
pub(super) async fn judge_offloaded<T: Send + 'static>(
    rt: &web::Data<Runtime>,
    work: impl FnOnce(&Runtime) -> T + Send + 'static,
) -> T {
    let Some(permits) = rt.offload.clone() else {
        return work(rt);
    };
    // The semaphore is never closed.
    let permit = permits.acquire_owned().await.ok();
    let rt = rt.clone().into_inner();
    match actix_web::rt::task::spawn_blocking(move || {
        let _permit = permit;
        work(&rt)
    })
    .await
    {
        Ok(t) => t,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

pub(super) fn judge(
    rt: &Runtime,
    req: DecideRequest,
    started: Instant,
) -> Result<DecisionOut, ApiError> {
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
        key_id: verdict.key_id.clone(),
        challenge: Some(verdict.challenge_state()).filter(|s| !s.is_empty()),
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
        key_id: verdict.key_id.map(|k| k.to_string()),
        challenge: verdict.challenge.map(|c| serde_json::json!(c)),
        clearance: verdict.clearance.map(|c| serde_json::json!(c)),
        cleared: verdict.cleared,
    })
}

/// Headers never recorded: credentials, and the anti-replay headers (useless once judged).
const UNRECORDED_HEADERS: [&str; 12] = [
    "x-rampart-solution",
    "x-rampart-clearance",
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
    pub(super) body: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) body_omitted: bool,
    pub(super) device_id: &'a Option<String>,
    pub(super) headers: std::collections::BTreeMap<std::borrow::Cow<'a, str>, &'a str>,
    pub(super) params: &'a Option<serde_json::Value>,
    pub(super) query: &'a str,
}

pub(super) fn recorded_request(req: &DecideRequest, max: usize) -> Option<RecordedJson> {
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

pub(super) async fn decide(
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
    // The whole body's UTF-8 checked once, then parsed as text: `from_slice` checks every
    // string again on its own (13% of the parse's instructions on the load test's body).
    let parsed: Result<DecideRequest, ApiError> = match std::str::from_utf8(&body) {
        Ok(text) => serde_json::from_str(text).map_err(json_error),
        Err(e) => Err(ApiError::new(
            400,
            "MALFORMED_JSON",
            format!("body is not valid JSON: it is not UTF-8 ({e})"),
        )),
    };
    let parsed = parsed.inspect_err(|e| rt.metrics.api_error(e.code))?;
    let out = judge_offloaded(&rt, move |rt| judge(rt, parsed, started)).await?;
    Ok(HttpResponse::Ok().json(out))
}

pub(super) async fn decide_batch(
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
    let out = judge_offloaded(&rt, move |rt| judge_items(rt, items)).await;
    Ok(HttpResponse::Ok().json(out))
}

/// The answers of a batch's items, in order (an item's error is its answer).
fn judge_items(
    rt: &Runtime,
    items: Vec<Box<serde_json::value::RawValue>>,
) -> Vec<serde_json::Value> {
    let mut out = Vec::with_capacity(items.len());
    let max_item = rt.limits.max_body_bytes;
    for (i, item) in items.into_iter().enumerate() {
        let started = Instant::now();
        // Each item is held to the limit of a single decide body, not the whole batch's.
        let answer = if item.get().len() > max_item {
            Err(ApiError::new(
                413,
                "BODY_TOO_LARGE",
                format!(
                    "batch item {i} is {} bytes; an item may be at most max_body_bytes = {max_item}",
                    item.get().len()
                ),
            ))
        } else {
            serde_json::from_str::<DecideRequest>(item.get())
                .map_err(json_error)
                .and_then(|r| judge(rt, r, started))
        };
        out.push(match answer {
            Ok(d) => serde_json::to_value(d).unwrap_or_default(),
            Err(e) => {
                rt.metrics.api_error(e.code);
                e.body()
            }
        });
    }
    out
}
