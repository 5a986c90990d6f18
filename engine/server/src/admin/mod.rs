//! The admin API (`/admin/v1/…`): one file per resource — [`session`] (who is calling, login),
//! [`rulesets`] (versions), [`sandbox`] (regressions, backtests, traces), [`rollout`], [`lists`],
//! [`audit`], [`settings`], [`keys`] (apps' signing keys), [`decisions`] (the log's read side),
//! [`subjects`] (what is remembered about an IP, user, device or JA3, and its repair),
//! [`repairs`] (rate-limit keys, circuit breakers, the repairs recorded) —
//! routed in [`configure`] below.
//! Every route checks its role first; see `docs/api.md`.

mod audit;
mod decisions;
mod keys;
mod lists;
mod repairs;
mod rollout;
mod rulesets;
mod sandbox;
mod session;
mod settings;
mod subjects;

use actix_web::{web, HttpRequest};

use crate::error::ApiError;
use crate::http::read_body;
use crate::runtime::Runtime;
use session::authorize;

/// Largest admin JSON body (rule set uploads included).
const MAX_ADMIN_BODY: usize = 8 * 1024 * 1024;

/// A JSON body of at most [`MAX_ADMIN_BODY`].
async fn json_body<T: serde::de::DeserializeOwned>(
    rt: &Runtime,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let body = read_body(rt, req, payload, MAX_ADMIN_BODY).await?;
    serde_json::from_slice(&body).map_err(crate::error::json_error)
}

/// A JSON body where an empty one means the defaults.
async fn json_body_or_default<T: serde::de::DeserializeOwned + Default>(
    rt: &Runtime,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let body = read_body(rt, req, payload, MAX_ADMIN_BODY).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        serde_json::from_slice(&body).map_err(crate::error::json_error)
    }
}

/// A control store failure: `503 CONTROL_UNAVAILABLE`.
fn store(e: crate::control::store::StoreError) -> ApiError {
    ApiError::new(503, "CONTROL_UNAVAILABLE", e.to_string())
}

/// `stable`, `candidate` or a version id.
fn resolve(rt: &Runtime, v: &str) -> Result<String, ApiError> {
    let state = rt.control.store.load().map_err(store)?;
    match v {
        "stable" => state
            .stable
            .ok_or_else(|| ApiError::new(404, "VERSION_NOT_FOUND", "nothing is stable yet")),
        "candidate" => state
            .candidate
            .map(|c| c.version)
            .ok_or_else(|| ApiError::new(404, "VERSION_NOT_FOUND", "no candidate")),
        v => Ok(v.to_string()),
    }
}

fn method_not_allowed() -> actix_web::Route {
    web::to(crate::error::method_not_allowed)
}

/// Registers the admin routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let r = |path: &str| {
        web::resource(path.to_string())
            .wrap(actix_web::middleware::from_fn(session::basic_off_worker))
            .default_service(method_not_allowed())
    };
    cfg.service(r("/admin/v1/login").route(web::post().to(session::login)))
        .service(r("/admin/v1/logout").route(web::post().to(session::logout)))
        .service(r("/admin/v1/session").route(web::get().to(session::session)))
        .service(r("/admin/v1/decisions/recent").route(web::get().to(decisions::recent)))
        .service(r("/admin/v1/decisions").route(web::get().to(decisions::query)))
        .service(r("/admin/v1/stats").route(web::get().to(decisions::stats)))
        .service(
            r("/admin/v1/rulesets")
                .route(web::get().to(rulesets::list))
                .route(web::post().to(rulesets::upload)),
        )
        .service(r("/admin/v1/rulesets/current").route(web::get().to(rulesets::current)))
        .service(r("/admin/v1/rulesets/validate").route(web::post().to(rulesets::validate)))
        .service(r("/admin/v1/rulesets/{version}").route(web::get().to(rulesets::get)))
        .service(r("/admin/v1/rulesets/{version}/diff").route(web::get().to(rulesets::diff)))
        .service(r("/admin/v1/rulesets/{version}/regress").route(web::post().to(sandbox::regress)))
        .service(
            r("/admin/v1/rulesets/{version}/activate").route(web::post().to(rulesets::activate)),
        )
        .service(
            r("/admin/v1/rulesets/{version}/backtest").route(web::post().to(sandbox::backtest)),
        )
        .service(r("/admin/v1/rulesets/{version}/trace").route(web::post().to(sandbox::trace)))
        .service(r("/admin/v1/settings").route(web::get().to(settings::get)))
        .service(
            r("/admin/v1/rollout")
                .route(web::get().to(rollout::get))
                .route(web::post().to(rollout::stage)),
        )
        .service(r("/admin/v1/rollout/approve").route(web::post().to(rollout::approve)))
        .service(r("/admin/v1/rollout/rollback").route(web::post().to(rollout::rollback)))
        .service(
            r("/admin/v1/lists")
                .route(web::get().to(lists::get))
                .route(web::post().to(lists::add)),
        )
        .service(r("/admin/v1/lists/{id}").route(web::delete().to(lists::remove)))
        .service(r("/admin/v1/audit").route(web::get().to(audit::query)))
        .service(r("/admin/v1/subjects/{kind}/{value}").route(web::get().to(subjects::get)))
        .service(
            r("/admin/v1/subjects/{kind}/{value}/reputation/reset")
                .route(web::post().to(subjects::reset_reputation)),
        )
        .service(r("/admin/v1/limits/reset").route(web::post().to(repairs::reset_limit)))
        .service(r("/admin/v1/breakers").route(web::get().to(repairs::breakers)))
        .service(r("/admin/v1/breakers/close").route(web::post().to(repairs::close_breaker)))
        .service(r("/admin/v1/breakers/open").route(web::post().to(repairs::open_breaker)))
        .service(r("/admin/v1/repairs").route(web::get().to(repairs::list)))
        .service(r("/admin/v1/hot-keys").route(web::get().to(repairs::hot_keys)))
        .service(r("/admin/v1/pools/{pool}").route(web::get().to(repairs::pool)))
        .service(r("/admin/v1/pools/{pool}/refill").route(web::post().to(repairs::refill_pool)))
        .service(
            r("/admin/v1/apps/{app}/keys")
                .route(web::get().to(keys::list))
                .route(web::post().to(keys::add))
                .route(web::delete().to(keys::retire_by_query)),
        )
        .service(r("/admin/v1/apps/{app}/keys/{id}").route(web::delete().to(keys::retire)))
        .service(r("/admin/v1/apps/{app}/keys/{id}/approve").route(web::post().to(keys::approve)))
        .service(
            r("/admin/v1/settings/log-level")
                .route(web::get().to(settings::log_level_get))
                .route(web::put().to(settings::log_level_put)),
        );
}
