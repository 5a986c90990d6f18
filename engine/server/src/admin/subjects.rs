//! What the engine remembers about one subject, and the repair of its reputation:
//! `GET /admin/v1/subjects/{kind}/{value}` and
//! `POST /admin/v1/subjects/{kind}/{value}/reputation/reset` (kind: `ip`, `user`, `device`, `ja3`).

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::{authorize, store};
use crate::auth::Role;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::runtime::Runtime;
use rampart_core::rollout::ListKind;

/// A subject from the path: its kind (as reputation names it) and value.
fn subject(path: &(String, String)) -> Result<(ListKind, &'static str, &str), ApiError> {
    let (kind, value) = (path.0.as_str(), path.1.as_str());
    let (list_kind, rep_kind) = match kind {
        "ip" => (ListKind::Ip, "ip"),
        "user" => (ListKind::User, "user"),
        "device" => (ListKind::Device, "device"),
        "ja3" => (ListKind::Ja3, "ja3"),
        _ => {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                format!("unknown subject kind {kind:?}: ip, user, device or ja3"),
            ))
        }
    };
    if value.is_empty() || value.len() > 256 {
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            "the subject's value is 1–256 bytes",
        ));
    }
    if list_kind == ListKind::Ip && value.parse::<std::net::IpAddr>().is_err() {
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            format!("{value:?} is not an IP address"),
        ));
    }
    Ok((list_kind, rep_kind, value))
}

/// Whether a list entry of `kind` covers `value` (an address inside a block, or the same value).
fn covers(kind: ListKind, entry: &str, value: &str) -> bool {
    match kind {
        ListKind::Ip => match (
            rampart_core::forward::IpNet::parse(entry),
            value.parse::<std::net::IpAddr>(),
        ) {
            (Some(net), Ok(ip)) => net.contains(ip),
            _ => false,
        },
        _ => entry.eq_ignore_ascii_case(value),
    }
}

/// Claim pools listed in a user's subject view.
const MAX_CLAIMS_SHOWN: usize = 100;

/// `GET /admin/v1/subjects/{kind}/{value}`: the subject's reputation, the list entries that
/// cover it, the rate limits, counters and distinct sets keyed by it, the claim pools a user
/// holds a claim in, and its last decisions (from the decision log; a log that cannot answer is reported
/// in `decisions_error`, the rest is answered).
pub(super) async fn get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let (kind, rep_kind, value) = subject(&path)?;
    let now = now_ms();
    let policy = &rt.rule_state.reputation;
    let reputation = match rt.rule_state.reputation(rep_kind, value, now) {
        Ok(points) => json!({
            "points": points,
            "window_ms": policy.window_ms,
            "deny_points": policy.deny_points,
            "challenge_points": policy.challenge_points,
        }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let s = rt.control.store.load().map_err(store)?;
    let lists: Vec<_> = s
        .lists
        .iter()
        .filter(|e| e.kind == kind && covers(kind, &e.value, value))
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["expired"] = json!(e.expires_ms.is_some_and(|t| t <= now));
            v
        })
        .collect();
    // The explorer's query, for the last day of this subject (JA3 is not a log filter).
    let mut f = crate::declog::query::Filter {
        from: Some(now - 24 * 3_600_000),
        limit: Some(20),
        ..Default::default()
    };
    match kind {
        ListKind::Ip => f.ip = Some(value.to_string()),
        ListKind::User => f.user = Some(value.to_string()),
        ListKind::Device => f.device_id = Some(value.to_string()),
        _ => {}
    }
    let mut out = json!({
        "kind": path.0,
        "value": value,
        "reputation": reputation,
        "lists": lists,
    });
    let [limits, counters, distinct] = keyed_state(&rt, kind, value, now);
    out["limits"] = json!(limits);
    out["counters"] = json!(counters);
    out["distinct"] = json!(distinct);
    if kind == ListKind::User {
        // The claim pools this user holds a claim in (coupons redeemed, prizes won).
        out["claims"] = match rt.rule_state.quotas.held(value, MAX_CLAIMS_SHOWN) {
            Ok(pools) => json!(pools
                .into_iter()
                .map(|pool| json!({ "pool": pool }))
                .collect::<Vec<_>>()),
            Err(e) => json!({ "error": e.to_string() }),
        };
    }
    if kind != ListKind::Ja3 {
        match crate::http::query_filtered(rt.clone(), f, false).await {
            Ok(v) => out["decisions"] = v["decisions"].clone(),
            Err(e) => out["decisions_error"] = json!(e.message),
        }
    }
    Ok(HttpResponse::Ok().json(out))
}

/// The rate limits, counters and distinct sets the active rule set keys by this subject
/// (`rate_limit("ip:" + req.ip, …)`, `count("orders:" + req.user, …)`, …) and where each stands
/// now, read without spending or adding anything: `(limits, counters, distinct)`. A store that
/// cannot answer is reported in the entry's `error`.
fn keyed_state(rt: &Runtime, kind: ListKind, value: &str, now: i64) -> [Vec<Value>; 3] {
    use rampart_core::rules::Keeps;
    let field = match kind {
        ListKind::Ip => "ip",
        ListKind::User => "user",
        ListKind::Device => "device_id",
        _ => "ja3",
    };
    let st = &rt.rule_state;
    let mut out: [Vec<Value>; 3] = Default::default();
    for k in rt.engine.rules().snapshot().subject_keys() {
        if k.field != field {
            continue;
        }
        let key = format!("{}{value}", k.prefix);
        let mut v = json!({ "rule": k.rule, "key": key });
        let (slot, read) = match k.keeps {
            Keeps::RateLimit {
                rate_per_sec,
                burst,
            } => {
                v["rate_per_sec"] = json!(rate_per_sec);
                v["burst"] = json!(burst);
                let read = st.limiter.gcra_tat(&key, now).map(|tat| {
                    let view =
                        rampart_core::store::limits::limit_view(tat, now, rate_per_sec, burst);
                    json!({
                        "remaining": view.remaining,
                        "retry_after_ms": view.retry_after_ms,
                        "full_in_ms": view.full_in_ms,
                    })
                });
                (0, read)
            }
            Keeps::Count { window_ms } => {
                v["window_ms"] = json!(window_ms);
                let read = st
                    .limiter
                    .get(&key, now, window_ms)
                    .map(|n| json!({ "count": n }));
                (1, read)
            }
            Keeps::Distinct { window_ms } => {
                v["window_ms"] = json!(window_ms);
                let read = st
                    .distinct
                    .count(&key, now, window_ms)
                    .map(|n| json!({ "count": n }));
                (2, read)
            }
        };
        match read {
            Ok(Value::Object(m)) => {
                if let Some(o) = v.as_object_mut() {
                    o.extend(m);
                }
            }
            Ok(_) => {}
            Err(e) => v["error"] = json!(e.to_string()),
        }
        out[slot].push(v);
    }
    out
}

/// `POST /admin/v1/subjects/{kind}/{value}/reputation/reset` (author): forgets the subject's
/// reputation, audited, here and within `poll_ms` on every instance (with Redis state: reset
/// once in Redis, the others forget their cached refusals; with local state: each instance
/// resets its own).
pub(super) async fn reset_reputation(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let (_, rep_kind, value) = subject(&path)?;
    let now = now_ms();
    let before = rt.rule_state.reputation(rep_kind, value, now)?;
    let repair = rt.control.repair(
        &rt.host(),
        &who,
        crate::control::Repair::Reputation {
            subject: rep_kind.to_string(),
            value: value.to_string(),
        },
        Some(before.to_string()),
    )?;
    Ok(HttpResponse::Ok().json(json!({
        "kind": path.0,
        "value": value,
        "reputation": { "before": before, "points": 0 },
        "repair": repair,
    })))
}
