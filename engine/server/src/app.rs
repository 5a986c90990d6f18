//! The whole HTTP application: the decision endpoints ([`crate::http`]), the admin API
//! ([`crate::admin`]) and the console ([`crate::console`]) on actix `App`s, sharing the runtime:
//! one listener for everything, or (`[server] admin_listen`) the decision path on one and the
//! operator plane on another.

use std::sync::Arc;

use actix_web::web;

use crate::error::{not_found, query_error};
use crate::runtime::Runtime;

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// Everything (no `admin_listen`).
    All,
    /// The decision path: decide, batch, authz, outcome, and time, health, OpenAPI.
    Decisions,
    /// The operator plane: the admin API, the console, `/metrics`, and time, health, OpenAPI.
    Operator,
}

/// Registers every route on an actix `App`.
pub fn configure(rt: Arc<Runtime>) -> impl FnOnce(&mut web::ServiceConfig) {
    configure_surface(rt, Surface::All)
}

/// Registers the routes of `surface` on an actix `App`; the others answer 404.
pub fn configure_surface(
    rt: Arc<Runtime>,
    surface: Surface,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::from(rt))
            .app_data(web::QueryConfig::default().error_handler(query_error));
        if surface == Surface::Operator {
            cfg.configure(crate::http::common_routes);
        } else {
            cfg.configure(crate::http::routes);
        }
        if surface != Surface::Decisions {
            cfg.configure(crate::http::metrics_route)
                .configure(crate::admin::configure)
                .configure(crate::console::configure);
        }
        cfg.default_service(web::to(not_found));
    }
}
