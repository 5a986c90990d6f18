//! Repairs of live state other than a subject's reputation ([`super::subjects`]), each audited
//! and applied on every instance within `[admin] poll_ms` ([`crate::control::Repair`]):
//! `POST /admin/v1/limits/reset` (one rate-limit or counter key), `GET /admin/v1/breakers` (this
//! instance's circuit breakers), `POST /admin/v1/breakers/close` and `…/open`, and
//! `GET /admin/v1/repairs` (the last repairs recorded), `GET /admin/v1/pools/{pool}` and
//! `POST /admin/v1/pools/{pool}/refill` (claim pools); and `GET /admin/v1/hot-keys` (the keys
//! called most).

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::{authorize, json_body, store};
use crate::auth::Role;
use crate::clock::now_ms;
use crate::control::{BreakerRepair, LimitReset, PoolRefill, Repair};
use crate::error::ApiError;
use crate::runtime::Runtime;
use rampart_core::store::breaker::State;

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(400, "INVALID_FIELD", msg)
}

/// `POST /admin/v1/limits/reset` (author): clears one rate limit and sliding window.
pub(super) async fn reset_limit(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let b: LimitReset = json_body(&rt, &req, payload).await?;
    if b.key.is_empty() || b.key.len() > 512 {
        return Err(invalid("key must be 1–512 bytes"));
    }
    let e = rt
        .control
        .repair(&rt.host(), &who, Repair::Limit { key: b.key.clone() }, None)?;
    Ok(HttpResponse::Ok().json(json!({ "key": b.key, "repair": e })))
}

/// Closes (`open` false) or opens the breaker the body names, on every instance.
async fn force_breaker(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
    open: bool,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let b: BreakerRepair = json_body(&rt, &req, payload).await?;
    if b.app.is_empty() || b.app.len() > 64 {
        return Err(invalid("app must be 1–64 bytes"));
    }
    if !b.route.starts_with('/') || b.route.len() > 1024 {
        return Err(invalid(
            "route must be a path (starting with /, at most 1024 bytes)",
        ));
    }
    let open_until_ms = match (open, b.for_ms) {
        (false, Some(_)) => return Err(invalid("for_ms is for opening a breaker")),
        (false, None) => None,
        (true, Some(ms)) if ms <= 0 => return Err(invalid("for_ms must be positive")),
        (true, Some(ms)) => Some(now_ms().saturating_add(ms)),
        (true, None) => Some(i64::MAX),
    };
    let e = rt.control.repair(
        &rt.host(),
        &who,
        Repair::Breaker {
            app: b.app,
            route: b.route,
            open_until_ms,
        },
        None,
    )?;
    Ok(HttpResponse::Ok().json(json!({ "repair": e })))
}

/// `POST /admin/v1/breakers/close` (author).
pub(super) async fn close_breaker(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    force_breaker(rt, req, payload, false).await
}

/// `POST /admin/v1/breakers/open` (author): refuses the route's requests (the rule's
/// `circuit_open(req, …)` is true) on every instance, for `for_ms` or until closed.
pub(super) async fn open_breaker(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    force_breaker(rt, req, payload, true).await
}

/// `GET /admin/v1/breakers` (viewer): this instance's breakers (each instance keeps its own, fed
/// by the outcomes reported to it).
pub(super) async fn breakers(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let now = now_ms();
    let list: Vec<_> = rt
        .rule_state
        .breakers
        .list(now)
        .into_iter()
        .map(|b| {
            let (app, route) = b.key.split_once('\u{0}').unwrap_or(("", &b.key));
            let (state, until) = match b.state {
                State::Closed => ("closed", None),
                State::Open { until } => ("open", (until != i64::MAX).then_some(until)),
                State::HalfOpen { .. } => ("half-open", None),
            };
            let ratio = |x: f64| {
                if b.requests > 0.0 {
                    (x / b.requests * 1000.0).round() / 1000.0
                } else {
                    0.0
                }
            };
            json!({
                "app": app,
                "route": route,
                "state": state,
                // When it probes again (absent: closed, half-open, or open until closed).
                "open_until_ms": until,
                "requests": b.requests.round(),
                "error_ratio": ratio(b.errors),
                "slow_ratio": ratio(b.slow),
                "config": {
                    "window_ms": b.cfg.window_ms,
                    "min_requests": b.cfg.min_requests,
                    "error_ratio": b.cfg.error_ratio,
                    "slow_ms": b.cfg.slow_ms,
                    "slow_ratio": b.cfg.slow_ratio,
                    "open_ms": b.cfg.open_ms,
                },
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "instance": &*rt.instance, "breakers": list })))
}

/// `GET /admin/v1/hot-keys?limit=N` (viewer): the rate-limit and counter keys this instance's
/// live decisions called most over the current minute and the one before (top `limit`, default
/// 20, at most 100), with the calls a rate limit refused.
pub(super) async fn hot_keys(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    q: web::Query<std::collections::HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let limit = match q.get("limit") {
        None => 20,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| invalid("limit must be 1–100"))?,
    };
    let keys = rt.rule_state.hot.top(limit, now_ms());
    Ok(HttpResponse::Ok().json(json!({
        "instance": &*rt.instance,
        "window_ms": 120_000,
        "keys": keys,
    })))
}

/// `GET /admin/v1/repairs` (viewer): the last repairs recorded (at most 256; the audit log keeps
/// every one).
pub(super) async fn list(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let s = rt.control.store.load().map_err(store)?;
    let mut repairs = s.repairs;
    repairs.reverse();
    Ok(HttpResponse::Ok().json(json!({ "repairs": repairs })))
}

fn check_pool(pool: &str) -> Result<(), ApiError> {
    if pool.is_empty() || pool.len() > 512 {
        return Err(invalid("pool must be 1–512 bytes"));
    }
    Ok(())
}

/// `GET /admin/v1/pools/{pool}` (viewer): the claims a pool granted (per stock segment on Redis)
/// and its refills. The stock itself is the rule's (`claim(pool, user, stock)`).
pub(super) async fn pool(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let pool = path.into_inner();
    check_pool(&pool)?;
    let v = rt.rule_state.quotas.view(&pool)?;
    Ok(HttpResponse::Ok().json(json!({
        "pool": pool,
        "claimed": v.claimed,
        "refilled": v.refilled,
        "segments": v.segments,
        "shared": rt.rule_state.quotas.shared(),
    })))
}

/// `POST /admin/v1/pools/{pool}/refill` (author): `add` more claims for the pool, on every
/// instance.
pub(super) async fn refill_pool(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let pool = path.into_inner();
    check_pool(&pool)?;
    let b: PoolRefill = json_body(&rt, &req, payload).await?;
    if !(1..=10_000_000).contains(&b.add) {
        return Err(invalid("add must be 1–10000000"));
    }
    let before = rt
        .rule_state
        .quotas
        .view(&pool)
        .ok()
        .map(|v| format!("claimed {} refilled {}", v.claimed, v.refilled));
    let e = rt.control.repair(
        &rt.host(),
        &who,
        Repair::Pool {
            pool: pool.clone(),
            add: b.add,
        },
        before,
    )?;
    Ok(HttpResponse::Ok().json(json!({ "pool": pool, "repair": e })))
}
