//! `/v1/authz`: forward-auth for nginx `auth_request`, Envoy ext_authz (HTTP) and Traefik
//! ForwardAuth; the proxy's headers become a decide request.

use super::decide::judge;
use crate::error::ApiError;
use crate::runtime::Runtime;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use rampart_core::DecideRequest;
use std::time::Instant;

/// The decide request a forward-auth call describes (`rampart_core::forward`).
pub(super) fn authz_request(
    req: &HttpRequest,
    trust: &rampart_core::forward::ProxyTrust,
) -> Result<DecideRequest, ApiError> {
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
    .to_decide_trusting(trust)
    .map_err(|e| ApiError::new(400, e.code(), e.to_string()))
}

/// `GET|POST /v1/authz`: forward-auth. 200 to allow; else the decision's status, with the
/// decision in `X-Rampart-*` headers (and the body).
pub(super) async fn authz(rt: web::Data<Runtime>, req: HttpRequest) -> HttpResponse {
    let started = Instant::now();
    let answer = match authz_request(&req, &rt.proxy_trust) {
        Ok(d) => super::decide::judge_offloaded(&rt, move |rt| judge(rt, d, started)).await,
        Err(e) => {
            rt.metrics.api_error(e.code);
            Err(e)
        }
    };
    match answer {
        Ok(out) => {
            let status = if out.action == rampart_core::Action::Allow {
                200
            } else {
                out.status
            };
            let headers = |r: &mut actix_web::HttpResponseBuilder| {
                r.insert_header(("X-Rampart-Decision", out.action.as_str()))
                    .insert_header(("X-Rampart-Code", out.code.as_str()))
                    .insert_header(("X-Rampart-Status", out.status.to_string()))
                    .insert_header(("X-Rampart-Decision-Id", out.decision_id.clone()));
                if let Some(k) = &out.key_id {
                    r.insert_header(("X-Rampart-Key-Id", k.as_str()));
                }
                // A challenged browser's page reads the proof of work from these (or from the
                // body); a verified solution's clearance comes back as the cookie the proxy
                // passes on.
                if let Some(c) = &out.challenge {
                    if let (Some(t), Some(d)) = (c["token"].as_str(), c["difficulty"].as_u64()) {
                        r.insert_header(("X-Rampart-Challenge", t))
                            .insert_header(("X-Rampart-Challenge-Difficulty", d.to_string()));
                    }
                }
                if let Some(t) = out.clearance.as_ref().and_then(|c| c["token"].as_str()) {
                    let ttl = rt.config.raw.challenge.clearance_ttl_ms / 1000;
                    r.insert_header((
                        "Set-Cookie",
                        format!(
                            "{}={t}; Path=/; Max-Age={ttl}; HttpOnly; SameSite=Lax",
                            rampart_core::challenge::CLEARANCE_COOKIE
                        ),
                    ));
                }
                if let Some(ms) = out.retry_after_ms.filter(|_| status == 429) {
                    r.insert_header(("Retry-After", ms.div_ceil(1000).max(1).to_string()));
                }
            };
            // A browser's page load that is refused gets the page (the challenge page for a
            // challenge): Traefik and Envoy show this answer to the client as it is.
            if status != 200 && super::page::wants_html(&req) {
                let challenge = out
                    .challenge
                    .as_ref()
                    .and_then(|c| c["token"].as_str())
                    .and_then(rampart_core::challenge::read_challenge);
                return super::page::page(
                    status,
                    Some(out.code.as_str()),
                    Some(&out.decision_id),
                    challenge,
                )
                .finish_with(headers);
            }
            let mut r =
                HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN));
            headers(&mut r);
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
