//! HTTP API, contract v1: `/v1/decide`, `/v1/decide/batch`, `/v1/authz` (and its page), `/v1/time`, `/healthz`, `/readyz`,
//! `/metrics`, and the admin endpoints `/admin/v1/decisions/recent`, `/admin/v1/rulesets/current`
//! and `POST /admin/v1/rulesets` (loopback only until admin auth lands).
//!
//! Errors of the call itself are answered 4xx with `{"error":{"code","message"}}`, never a 5xx.

pub mod openapi;
pub mod reqid;

use actix_web::web;

mod authz;
mod body;
mod decide;
mod ops;
mod outcome;
mod page;

use crate::error::method_not_allowed;
use authz::authz;
pub use body::header_limit;
pub(crate) use body::read_body;
use decide::{decide, decide_batch};
pub use decide::{DecisionOut, RulesetRef};
use ops::{healthz, metrics, openapi, readyz, time};
pub(crate) use ops::{query_endpoint, query_filtered};
use outcome::outcome;
pub(crate) use outcome::Outcome;
use page::authz_page;

fn get_only(path: &str, route: actix_web::Route) -> actix_web::Resource {
    web::resource(path)
        .route(route)
        .default_service(web::to(method_not_allowed))
}

/// Registers the decision-path endpoints (decide, batch, authz, outcome) and the ones every
/// listener serves (time, health, OpenAPI); [`crate::app::configure`] mounts them beside
/// `/metrics`, the admin API and the console.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
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
    // The page a proxy shows for a refused browser request (the challenge page).
    .service(
        web::resource("/v1/authz-page")
            .route(web::get().to(authz_page))
            .route(web::head().to(authz_page))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/outcome")
            .route(web::post().to(outcome))
            .default_service(web::to(method_not_allowed)),
    )
    .configure(common_routes);
}

/// Served on every listener: time, health, OpenAPI.
pub fn common_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/time")
            .route(web::get().to(time))
            .default_service(web::to(method_not_allowed)),
    )
    .service(get_only("/healthz", web::get().to(healthz)))
    .service(get_only("/readyz", web::get().to(readyz)))
    .service(get_only("/openapi.json", web::get().to(openapi)));
}

/// `/metrics`: on the operator listener when there is one (`[server] admin_listen`).
pub fn metrics_route(cfg: &mut web::ServiceConfig) {
    cfg.service(get_only("/metrics", web::get().to(metrics)));
}

#[cfg(test)]
mod tests {
    use super::decide::recorded_request;
    use rampart_core::DecideRequest;
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
