//! Who is calling: `Authorization: Bearer` (API tokens), `Basic` (users' passwords, throttled by
//! user name and client address) or the session cookie (with its CSRF token on changes); the roles
//! each route needs; and `POST /admin/v1/login`, `POST /admin/v1/logout`, `GET /admin/v1/session`.

use std::collections::HashMap;

use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::json_body;
use crate::auth::SESSION_COOKIE;
use crate::auth::{ct_eq, AuthError, Principal, Role, Via};
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::runtime::Runtime;

fn auth_error(rt: &Runtime, e: AuthError) -> ApiError {
    rt.metrics.auth_failures.inc();
    match e {
        AuthError::Unauthenticated(m) => ApiError::new(401, "UNAUTHENTICATED", m),
        AuthError::Throttled { retry_after_ms } => ApiError::new(
            429,
            "LOGIN_THROTTLED",
            format!(
                "too many failed logins; try again in {} s",
                (retry_after_ms + 999) / 1000
            ),
        )
        .with_retry_after(retry_after_ms),
        AuthError::Csrf => ApiError::new(
            403,
            "CSRF_FAILED",
            "a session request that changes state needs the session's x-csrf-token header",
        ),
    }
}

fn client_key(rt: &Runtime, req: &HttpRequest) -> String {
    // Behind a load balancer every peer is the balancer: the client is what the trusted proxies
    // say ([server] trusted_proxies), as for forward-auth; an untrusted peer is the client itself.
    let headers: Vec<(&str, &str)> = req
        .headers()
        .iter()
        .filter(|(n, _)| *n == "x-forwarded-for" || *n == "x-real-ip")
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
        .collect();
    let peer = req.peer_addr().map(|a| a.ip().to_string());
    let client = rampart_core::forward::CheckRequest {
        headers: &headers,
        method: "",
        path_and_query: "",
        peer_ip: peer.as_deref(),
    }
    .client(&rt.proxy_trust.proxies);
    format!("ip:{}", client.or(peer).unwrap_or_default())
}

/// Checks a user's password, with throttling by user name and by client address.
fn check_password(
    rt: &Runtime,
    client: String,
    user: &str,
    password: &str,
) -> Result<Principal, AuthError> {
    let c = &rt.control;
    let now = now_ms();
    let keys = [format!("user:{user}"), client];
    for k in &keys {
        if let Err(ms) = c.throttle.check(k, now) {
            return Err(AuthError::Throttled { retry_after_ms: ms });
        }
    }
    let ok = match c.identities.users.get(user) {
        Some(u) => {
            // A script sending Basic credentials on every call pays argon2 once a minute, not
            // per call: a verified (user, hash, password digest) is remembered for 60 s.
            let digest: [u8; 32] = {
                use sha2::Digest;
                let mut h = sha2::Sha256::new();
                h.update(u.password_hash.as_bytes());
                h.update([0]);
                h.update(password.as_bytes());
                h.finalize().into()
            };
            let cache = VERIFIED.get_or_init(|| std::sync::Mutex::new(HashMap::new()));
            let hit = cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(user)
                .is_some_and(|(d, until)| *until > now && ct_eq(d, &digest));
            if hit || crate::auth::verify_password(&u.password_hash, password) {
                let mut m = cache.lock().unwrap_or_else(|e| e.into_inner());
                if m.len() > 10_000 {
                    m.clear();
                }
                m.insert(user.to_string(), (digest, now + 60_000));
                Some(u)
            } else {
                None
            }
        }
        None => {
            // Same work for an unknown name, so timing does not say which names exist.
            let _ = crate::auth::verify_password(DUMMY_HASH, password);
            None
        }
    };
    match ok {
        Some(u) => {
            for k in &keys {
                c.throttle.succeeded(k);
            }
            Ok(Principal {
                name: u.name.clone(),
                role: u.role,
                via: Via::Basic,
                session: None,
            })
        }
        None => {
            for k in &keys {
                c.throttle.failed(k, now);
            }
            Err(AuthError::Unauthenticated(
                "wrong user name or password".into(),
            ))
        }
    }
}

/// The outcome of checking a request's Basic credentials, left for [`authenticate`].
#[derive(Clone)]
struct BasicChecked(Result<Principal, AuthError>);

/// `Authorization: Basic` credentials: (user, password).
fn basic_credentials(value: &str) -> Result<(String, String), AuthError> {
    use base64ct::Encoding;
    let malformed = || AuthError::Unauthenticated("malformed Basic credentials".into());
    let raw = base64ct::Base64::decode_vec(value.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(malformed)?;
    let (user, password) = raw.split_once(':').ok_or_else(malformed)?;
    Ok((user.to_string(), password.to_string()))
}

/// Middleware of every admin route: checks `Authorization: Basic` credentials on actix's
/// blocking pool (argon2 takes tens of milliseconds and must not hold an HTTP worker, least of
/// all a decision worker when admin and decisions share a listener), and leaves the outcome in
/// the request for [`authenticate`].
pub(super) async fn basic_off_worker(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let basic = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, v)| basic_credentials(v));
    if let (Some(creds), Some(rt)) = (basic, req.app_data::<web::Data<Runtime>>().cloned()) {
        let checked = match creds {
            Ok((user, password)) => {
                let client = client_key(&rt, req.request());
                let rt = rt.into_inner();
                web::block(move || check_password(&rt, client, &user, &password))
                    .await
                    .unwrap_or_else(|e| Err(AuthError::Unauthenticated(format!("busy: {e}"))))
            }
            Err(e) => Err(e),
        };
        req.extensions_mut().insert(BasicChecked(checked));
    }
    next.call(req).await
}

type Verified = std::sync::Mutex<HashMap<String, ([u8; 32], i64)>>;
static VERIFIED: std::sync::OnceLock<Verified> = std::sync::OnceLock::new();

/// An argon2 hash of a random password nobody knows (for unknown user names).
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2nQ7DDkTEr2FNPzAk3L8dGkSBjX3wJ0qF5ZrB3J1u4U";

fn authenticate(rt: &Runtime, req: &HttpRequest) -> Result<Principal, AuthError> {
    if let Some(h) = req.headers().get("authorization") {
        let h = h
            .to_str()
            .map_err(|_| AuthError::Unauthenticated("unreadable Authorization header".into()))?;
        let (scheme, value) = h.split_once(' ').unwrap_or((h, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            let t = rt
                .control
                .identities
                .token(value.trim())
                .ok_or_else(|| AuthError::Unauthenticated("unknown API token".into()))?;
            return Ok(Principal {
                name: t.name.clone(),
                role: t.role,
                via: Via::Token,
                session: None,
            });
        }
        if scheme.eq_ignore_ascii_case("basic") {
            // Checked before the handler, on the blocking pool, by `basic_off_worker`.
            return req
                .extensions()
                .get::<BasicChecked>()
                .map(|c| c.0.clone())
                .unwrap_or_else(|| {
                    Err(AuthError::Unauthenticated(
                        "Basic credentials are accepted on the admin API only".into(),
                    ))
                });
        }
        return Err(AuthError::Unauthenticated(format!(
            "unsupported Authorization scheme {scheme:?} (use Bearer or Basic)"
        )));
    }
    if let Some(cookie) = session_cookie(req) {
        let c = &rt.control;
        let now = now_ms();
        let s = c.sessions.open(&cookie, now).ok_or_else(|| {
            AuthError::Unauthenticated("session expired or invalid; log in".into())
        })?;
        // Fails closed: a session whose revocation cannot be checked is not accepted.
        match c.store.is_revoked(&s.id, now) {
            Ok(false) => {}
            Ok(true) => {
                return Err(AuthError::Unauthenticated(
                    "logged out; log in again".into(),
                ))
            }
            Err(e) => {
                return Err(AuthError::Unauthenticated(format!(
                    "cannot check the session ({e}); use an API token or try again"
                )))
            }
        }
        let u = c
            .identities
            .users
            .get(&s.user)
            .ok_or_else(|| AuthError::Unauthenticated("user no longer exists".into()))?;
        let safe = matches!(req.method().as_str(), "GET" | "HEAD" | "OPTIONS");
        if !safe {
            let want = c.sessions.csrf(&s.id);
            let got = req
                .headers()
                .get("x-csrf-token")
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            if !ct_eq(want.as_bytes(), got) {
                return Err(AuthError::Csrf);
            }
        }
        return Ok(Principal {
            name: u.name.clone(),
            role: u.role,
            via: Via::Session,
            session: Some(s.id),
        });
    }
    Err(AuthError::Unauthenticated(
        "log in (POST /admin/v1/login) or send Authorization: Bearer <token> or Basic".into(),
    ))
}

/// The session cookie's value, if the request carries one.
fn session_cookie(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get_all("cookie")
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.trim_matches('"').to_string())
}

/// A `Set-Cookie` value for the session cookie (`max_age_s` 0 removes it).
fn set_cookie(value: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{SESSION_COOKIE}={value}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The caller, if they hold at least `need`.
pub(super) fn authorize(
    rt: &Runtime,
    req: &HttpRequest,
    need: Role,
) -> Result<Principal, ApiError> {
    let p = authenticate(rt, req).map_err(|e| auth_error(rt, e))?;
    if p.role < need {
        return Err(ApiError::new(
            403,
            "FORBIDDEN",
            format!(
                "{} {} needs the {} role; {} is {}",
                req.method(),
                req.path(),
                need.as_str(),
                p.name,
                p.role.as_str()
            ),
        ));
    }
    Ok(p)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    user: String,
    password: String,
}

pub(super) async fn login(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let l: Login = json_body(&rt, &req, payload).await?;
    let rt2 = rt.clone().into_inner();
    let client = client_key(&rt, &req);
    // argon2 takes tens of milliseconds: off the worker.
    let p = web::block(move || check_password(&rt2, client, &l.user, &l.password))
        .await
        .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))?
        .map_err(|e| auth_error(&rt, e))?;
    let c = &rt.control;
    let (cookie, s) = c.sessions.issue(&p.name, now_ms());
    let csrf = c.sessions.csrf(&s.id);
    let who = Principal {
        via: Via::Session,
        session: Some(s.id.clone()),
        ..p
    };
    c.audit(
        &who,
        "login",
        &who.name,
        None,
        None,
        serde_json::Value::Null,
    );
    let ck = set_cookie(&cookie, c.sessions.ttl_ms / 1000, c.cookie_secure);
    Ok(HttpResponse::Ok()
        .insert_header(("set-cookie", ck))
        .insert_header(("cache-control", "no-store"))
        .json(serde_json::json!({
            "user": who.name,
            "role": who.role,
            "csrf_token": csrf,
            "expires_ms": s.expires_ms,
        })))
}

pub(super) async fn logout(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let p = authorize(&rt, &req, Role::Viewer)?;
    if let Some(id) = &p.session {
        let until = now_ms() + rt.control.sessions.ttl_ms;
        rt.control
            .store
            .revoke(id, until)
            .map_err(|e| ApiError::new(503, "CONTROL_UNAVAILABLE", e.to_string()))?;
        rt.control
            .audit(&p, "logout", &p.name, None, None, serde_json::Value::Null);
    }
    let gone = set_cookie("", 0, rt.control.cookie_secure);
    Ok(HttpResponse::Ok()
        .insert_header(("set-cookie", gone))
        .json(serde_json::json!({ "logged_out": true })))
}

pub(super) async fn session(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let p = authorize(&rt, &req, Role::Viewer)?;
    let csrf = p.session.as_ref().map(|id| rt.control.sessions.csrf(id));
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "user": p.name,
        "role": p.role,
        "via": p.via,
        "csrf_token": csrf,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test;

    /// argon2 never runs on the thread that serves the request: [`authenticate`] only reads what
    /// the blocking pool decided (`basic_off_worker`, mounted on every admin route). Before, it
    /// hashed inline, on an HTTP worker shared with decisions.
    #[actix_web::test]
    async fn basic_credentials_are_never_hashed_on_the_serving_thread() {
        let dir = std::env::temp_dir().join(format!("rampart-basic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hash = crate::auth::hash_password("alice-pw").unwrap();
        let path = dir.join("rampart.toml");
        std::fs::write(
            &path,
            format!(
                "[[apps]]\nid = 'a'\nsecret = 'x'\n[decision_log]\ndir = '{}'\n\
                 [admin]\nstate_dir = '{}'\n\
                 [[admin.users]]\nname = 'alice'\nrole = 'author'\npassword_hash = '{hash}'\n",
                dir.join("log").display(),
                dir.join("control").display()
            ),
        )
        .unwrap();
        let v = crate::config::Config::load_with_env(Some(&path), std::iter::empty())
            .unwrap()
            .validate()
            .unwrap();
        let rt = crate::runtime::Runtime::build(v).unwrap();
        use base64ct::Encoding;
        let basic = format!(
            "Basic {}",
            base64ct::Base64::encode_string(b"alice:alice-pw")
        );
        let req = test::TestRequest::get()
            .uri("/admin/v1/session")
            .insert_header(("authorization", basic.clone()))
            .to_http_request();
        assert!(matches!(
            authenticate(&rt, &req),
            Err(AuthError::Unauthenticated(_))
        ));
        let app =
            test::init_service(actix_web::App::new().configure(crate::app::configure(rt.clone())))
                .await;
        let resp = test::call_service(
            &app,
            test::TestRequest::get()
                .uri("/admin/v1/session")
                .insert_header(("authorization", basic))
                .to_request(),
        )
        .await;
        assert_eq!(resp.status().as_u16(), 200);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
