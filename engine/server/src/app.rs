//! The whole HTTP application: the decision endpoints ([`crate::http`]), the admin API
//! ([`crate::admin`]) and the console ([`crate::console`]) on one actix `App`, sharing the runtime.

use std::sync::Arc;

use actix_web::web;

use crate::error::{not_found, query_error};
use crate::runtime::Runtime;

/// Registers every route on an actix `App`.
pub fn configure(rt: Arc<Runtime>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::from(rt))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .configure(crate::http::routes)
            .configure(crate::admin::configure)
            .configure(crate::console::configure)
            .default_service(web::to(not_found));
    }
}
