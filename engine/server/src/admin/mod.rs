//! The admin API (`/admin/v1/…`): authentication, rule set versions, regression, rollout,
//! lists, audit log and runtime settings. Every route checks its role first; see `docs/api.md`.

use std::collections::{BTreeMap, HashMap};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use crate::auth::SESSION_COOKIE;
use crate::auth::{ct_eq, AuthError, Principal, Role, Via};
use crate::clock::now_ms;
use crate::control::{NewListEntry, StageRequest};
use crate::error::ApiError;
use crate::http::read_body;
use crate::runtime::Runtime;

/// Largest admin JSON body (rule set uploads included).
const MAX_ADMIN_BODY: usize = 8 * 1024 * 1024;

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

fn client_key(req: &HttpRequest) -> String {
    format!(
        "ip:{}",
        req.peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default()
    )
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
            use base64ct::Encoding;
            let raw = base64ct::Base64::decode_vec(value.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| AuthError::Unauthenticated("malformed Basic credentials".into()))?;
            let (user, password) = raw
                .split_once(':')
                .ok_or_else(|| AuthError::Unauthenticated("malformed Basic credentials".into()))?;
            return check_password(rt, client_key(req), user, password);
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
pub fn authorize(rt: &Runtime, req: &HttpRequest, need: Role) -> Result<Principal, ApiError> {
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

async fn json_body<T: serde::de::DeserializeOwned>(
    rt: &Runtime,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let body = read_body(rt, req, payload, MAX_ADMIN_BODY).await?;
    serde_json::from_slice(&body).map_err(crate::error::json_error)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    user: String,
    password: String,
}

async fn login(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let l: Login = json_body(&rt, &req, payload).await?;
    let rt2 = rt.clone().into_inner();
    let client = client_key(&req);
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

async fn logout(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
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

async fn session(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let p = authorize(&rt, &req, Role::Viewer)?;
    let csrf = p.session.as_ref().map(|id| rt.control.sessions.csrf(id));
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "user": p.name,
        "role": p.role,
        "via": p.via,
        "csrf_token": csrf,
    })))
}

// ---- rule sets ----

async fn rulesets(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let versions = rt.control.store.versions().map_err(store)?;
    let state = rt.control.store.load().map_err(store)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "stable": state.stable,
        "candidate": state.candidate,
        "versions": versions,
    })))
}

fn store(e: crate::control::store::StoreError) -> ApiError {
    ApiError::new(503, "CONTROL_UNAVAILABLE", e.to_string())
}

async fn ruleset_current(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let set = rt.engine.rules().snapshot();
    let (evaluations, errors) = set.counters();
    let cand = rt.engine.candidate();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "version": set.version(),
        "rules": set.rules(),
        "evaluations": evaluations,
        "errors": errors,
        "candidate": cand.map(|c| serde_json::json!({
            "version": c.set.version(),
            "stage": match &c.stage {
                rampart_core::rollout::Stage::Shadow => "shadow",
                rampart_core::rollout::Stage::Canary { .. } => "canary",
            },
            "percent": match &c.stage {
                rampart_core::rollout::Stage::Canary { percent, .. } => Some(*percent),
                rampart_core::rollout::Stage::Shadow => None,
            },
            "rules": c.set.rules(),
            "stats": c.stats.snapshot(),
        })),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Upload {
    /// Path relative to the rule directory (`edge/x.rhai`, `lists/y.txt`) → file text.
    files: BTreeMap<String, String>,
    #[serde(default)]
    message: String,
}

/// Takes a signed bundle (`rampart-rules bundle`: `format`, `manifest`, `signature`, `files`),
/// or, in dev mode only (`[admin] allow_unsigned_uploads`), plain `{files, message}`.
async fn ruleset_upload(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    use rampart_core::lifecycle::bundle::{Bundle, BundleError};
    let who = authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let admin = &rt.config.raw.admin;
    // A bundle names its format; anything else is a plain upload.
    let is_bundle = serde_json::from_slice::<serde_json::Value>(&body)
        .map_err(crate::error::json_error)?
        .get("format")
        .is_some();
    let refuse = |e: BundleError| {
        rt.metrics.ruleset_rejected.inc();
        rt.control.audit(
            &who,
            "ruleset.refused",
            "-",
            None,
            None,
            serde_json::json!({ "code": e.code(), "reason": e.to_string() }),
        );
        ApiError::new(e.status(), e.code(), e.to_string())
    };
    let (sources, message, provenance) = if is_bundle {
        let bundle = Bundle::parse(&body).map_err(refuse)?;
        let v = bundle
            .verify(&admin.trusted_keys(), admin.allow_unsigned_uploads)
            .map_err(refuse)?;
        let sources = bundle.sources();
        let provenance = crate::control::Provenance {
            signed_by: v.signed_by,
            origin: Some(v.manifest.origin),
        };
        (sources, v.manifest.message, provenance)
    } else {
        if !admin.allow_unsigned_uploads {
            return Err(refuse(BundleError::Unsigned));
        }
        let u: Upload = serde_json::from_slice(&body).map_err(crate::error::json_error)?;
        let sources = u
            .files
            .into_iter()
            .map(|(path, text)| rampart_core::rules::Source { path, text })
            .collect();
        (sources, u.message, Default::default())
    };
    let (meta, created) =
        rt.control
            .upload(&rt.host(), &who, &sources, &message, "upload", provenance)?;
    let body = serde_json::json!({ "version": meta.version, "created": created, "meta": meta });
    Ok(if created {
        HttpResponse::Created().json(body)
    } else {
        HttpResponse::Ok().json(body)
    })
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

async fn ruleset_get(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let v = resolve(&rt, &path)?;
    let doc = rt.control.doc(&v)?;
    Ok(HttpResponse::Ok().json(doc))
}

#[derive(Deserialize)]
struct DiffQuery {
    against: Option<String>,
}

async fn ruleset_diff(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let q = web::Query::<DiffQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?;
    let v = resolve(&rt, &path)?;
    let against = resolve(&rt, q.against.as_deref().unwrap_or("stable"))?;
    let (new, old) = (rt.control.doc(&v)?, rt.control.doc(&against)?);
    let mut files = Vec::new();
    let paths: std::collections::BTreeSet<&String> =
        new.sources.keys().chain(old.sources.keys()).collect();
    for p in paths {
        let (a, b) = (
            old.sources.get(p).map(String::as_str).unwrap_or(""),
            new.sources.get(p).map(String::as_str).unwrap_or(""),
        );
        if a == b {
            continue;
        }
        let status = match (old.sources.contains_key(p), new.sources.contains_key(p)) {
            (false, true) => "added",
            (true, false) => "removed",
            _ => "modified",
        };
        let diff = similar::TextDiff::from_lines(a, b)
            .unified_diff()
            .context_radius(3)
            .header(&format!("{against}/{p}"), &format!("{v}/{p}"))
            .to_string();
        files.push(serde_json::json!({ "path": p, "status": status, "unified": diff }));
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "version": v,
        "against": against,
        "files": files,
    })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RegressRequest {
    /// Extra samples (the same format as the files in `rules/samples/`).
    samples: Vec<serde_json::Value>,
    /// Compare with this version (default: the stable one).
    against: Option<String>,
    /// Leave the server's own samples out.
    only_uploaded: bool,
}

async fn ruleset_regress(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let r: RegressRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RegressRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(crate::error::json_error)?
    };
    let v = resolve(&rt, &path)?;
    let against = resolve(&rt, r.against.as_deref().unwrap_or("stable"))?;
    let (cand, base) = (rt.control.doc(&v)?, rt.control.doc(&against)?);
    let mut samples = Vec::new();
    for (i, s) in r.samples.iter().enumerate() {
        let text = s.to_string();
        let sample =
            rampart_core::lifecycle::regress::Sample::parse(&format!("uploaded[{i}]"), &text)
                .map_err(|e| ApiError::new(400, "INVALID_SAMPLE", e.to_string()))?;
        samples.push(sample);
    }
    if !r.only_uploaded {
        samples.extend(
            crate::runtime::samples::server_samples(&rt.config)
                .map_err(|e| ApiError::new(503, "SAMPLES_UNAVAILABLE", e))?,
        );
    }
    let settings = rt.config.raw.rules.settings();
    let out = web::block(move || -> Result<serde_json::Value, ApiError> {
        let run = |doc: &crate::control::VersionDoc| {
            rampart_core::lifecycle::regress::Runner::new(doc.sources(), settings.clone())
                .map(|r| r.run(&samples))
                .map_err(ruleset_invalid)
        };
        let (new, old) = (run(&cand)?, run(&base)?);
        Ok(crate::runtime::samples::report_json(&new, Some(&old)))
    })
    .await
    .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))??;
    Ok(HttpResponse::Ok().json(out))
}

/// `422 RULESET_INVALID` with the located errors of a stored version that does not compile.
fn ruleset_invalid(errs: Vec<rampart_core::rules::RuleError>) -> ApiError {
    ApiError::new(422, "RULESET_INVALID", format!("{} problem(s)", errs.len()))
        .with_details(serde_json::to_value(&errs).unwrap_or_default())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct BacktestRequest {
    /// How far back to replay (default 1, at most 168).
    hours: Option<f64>,
    /// At most this many recorded decisions, oldest first (default 100,000, at most 1,000,000).
    max_rows: Option<usize>,
    /// Examples of changed decisions to return (default 20, at most 1000).
    examples: Option<usize>,
}

async fn ruleset_backtest(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let b: BacktestRequest = if body.iter().all(u8::is_ascii_whitespace) {
        BacktestRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(crate::error::json_error)?
    };
    let hours = b.hours.unwrap_or(1.0);
    if !(hours > 0.0 && hours <= 168.0) {
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            "hours must be > 0 and ≤ 168",
        ));
    }
    let max_rows = b.max_rows.unwrap_or(100_000);
    if !(1..=1_000_000).contains(&max_rows) {
        return Err(ApiError::new(
            400,
            "INVALID_FIELD",
            "max_rows must be 1–1000000",
        ));
    }
    let examples = b.examples.unwrap_or(20).min(1000);
    let v = resolve(&rt, &path)?;
    let doc = rt.control.doc(&v)?;
    let to = now_ms() + 1;
    let from = to - (hours * 3_600_000.0) as i64;
    let dl = &rt.config.raw.decision_log;
    let fetched = match &dl.clickhouse_url {
        Some(_) => {
            let s = crate::declog::ch_settings(dl);
            crate::declog::query::recorded_ch(&s, from, to, max_rows).await
        }
        None => {
            let dir = dl.dir.clone();
            web::block(move || crate::declog::query::recorded_local(&dir, from, to, max_rows))
                .await
                .map_err(|e| ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()))?
        }
    };
    let (rows, truncated) = fetched.map_err(|e| match e {
        crate::declog::query::QueryError::Invalid(m) => ApiError::new(400, "INVALID_QUERY", m),
        e => ApiError::new(503, "LOG_UNAVAILABLE", e.to_string()),
    })?;
    let settings = rt.config.raw.rules.settings();
    let max_keys = rt.config.raw.rules.max_limiter_keys;
    let report = web::block(move || -> Result<serde_json::Value, ApiError> {
        // A fresh world: the candidate's counters and claims start empty, nothing live is touched.
        let state = rampart_core::rules::RuleState::local(max_keys);
        let set = rampart_core::rules::RuleSet::compile(&doc.sources(), settings, &state)
            .map_err(ruleset_invalid)?;
        let recs: Vec<_> = rows
            .iter()
            .map(rampart_core::lifecycle::backtest::Recorded::from_row)
            .collect();
        let r = rampart_core::lifecycle::backtest::backtest(&set, &recs, examples);
        let mut out = serde_json::to_value(&r).unwrap_or_default();
        out["from_ms"] = from.into();
        out["to_ms"] = to.into();
        out["truncated"] = truncated.into();
        Ok(out)
    })
    .await
    .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))??;
    Ok(HttpResponse::Ok().json(report))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateRequest {
    files: BTreeMap<String, String>,
}

/// Compiles a set without storing it: the console's editor checks a draft with this.
async fn ruleset_validate(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let v: ValidateRequest = serde_json::from_slice(&body).map_err(crate::error::json_error)?;
    let sources: Vec<_> = v
        .files
        .into_iter()
        .map(|(path, text)| rampart_core::rules::Source { path, text })
        .collect();
    let settings = rt.config.raw.rules.settings();
    let out = web::block(move || {
        // Against throwaway stores: compiling has no effect on live state.
        let state = rampart_core::rules::RuleState::local(16);
        match rampart_core::rules::RuleSet::compile(&sources, settings, &state) {
            Ok(set) => serde_json::json!({
                "valid": true, "version": set.version(), "rules": set.rules(), "problems": []
            }),
            Err(errs) => serde_json::json!({
                "valid": false,
                "version": rampart_core::rules::content_version(&sources),
                "rules": [],
                "problems": errs,
            }),
        }
    })
    .await
    .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))?;
    Ok(HttpResponse::Ok().json(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceRequest {
    /// The name of one of the server's samples.
    sample: Option<String>,
    /// A decision as `GET /admin/v1/decisions` returns it (with its recorded `request`).
    decision: Option<serde_json::Value>,
}

/// One sample, or one recorded decision, through `{version}` with a trace of every step and rule.
async fn ruleset_trace(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let t: TraceRequest = serde_json::from_slice(&body).map_err(crate::error::json_error)?;
    let v = resolve(&rt, &path)?;
    let doc = rt.control.doc(&v)?;
    let settings = rt.config.raw.rules.settings();
    let out = match (t.sample, t.decision) {
        (Some(name), None) => {
            let sample = crate::runtime::samples::server_samples(&rt.config)
                .map_err(|e| ApiError::new(503, "SAMPLES_UNAVAILABLE", e))?
                .into_iter()
                .find(|s| s.name == name)
                .ok_or_else(|| {
                    ApiError::new(404, "NOT_FOUND", format!("no sample named {name:?}"))
                })?;
            web::block(move || -> Result<serde_json::Value, ApiError> {
                let runner = rampart_core::lifecycle::regress::Runner::new(doc.sources(), settings)
                    .map_err(ruleset_invalid)?;
                let (result, trace) = runner.trace_one(&sample);
                Ok(serde_json::json!({
                    "version": doc.meta.version, "kind": "sample", "sample": sample,
                    "result": result, "trace": trace,
                }))
            })
            .await
            .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))??
        }
        (None, Some(row)) => {
            let rec = rampart_core::lifecycle::backtest::Recorded::from_row(&row);
            let Some(request) = rec.request.clone() else {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "decision: no recorded request to replay (request is null)",
                ));
            };
            let max_keys = rt.config.raw.rules.max_limiter_keys;
            web::block(move || -> Result<serde_json::Value, ApiError> {
                // As a backtest: the rule tiers in a fresh world, at the recorded time.
                let state = rampart_core::rules::RuleState::local(max_keys);
                let set = rampart_core::rules::RuleSet::compile(&doc.sources(), settings, &state)
                    .map_err(ruleset_invalid)?;
                let rreq = rampart_core::rules::Req::from_request(&request, rec.time_ms);
                let (verdict, trace) = set.judge_traced(&rreq);
                let verdict = verdict.unwrap_or_else(rampart_core::Verdict::allow);
                Ok(serde_json::json!({
                    "version": doc.meta.version, "kind": "replay",
                    "decision_id": rec.decision_id,
                    "recorded": {"action": rec.action, "code": rec.code, "tier": rec.tier,
                                 "rule": rec.rule},
                    "replayed": {"action": verdict.action, "code": verdict.code,
                                 "tier": verdict.tier, "rule": verdict.rule,
                                 "reasons": verdict.reasons},
                    "trace": trace,
                }))
            })
            .await
            .map_err(|e| ApiError::new(503, "BUSY", e.to_string()))??
        }
        _ => {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                "give exactly one of sample (a sample name) or decision (a decision row)",
            ))
        }
    };
    Ok(HttpResponse::Ok().json(out))
}

/// The running configuration, without secrets: what the console's settings page shows.
async fn settings_get(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let mut view = rt.config.settings_view();
    view["log_level"] = crate::runtime::logging::level().into();
    Ok(HttpResponse::Ok().json(view))
}

async fn ruleset_activate(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let v = resolve(&rt, &path)?;
    let s = rt.control.activate(&rt.host(), &who, &v)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}

// ---- rollout ----

fn rollout_view(rt: &Runtime, s: &crate::control::ControlState) -> serde_json::Value {
    let live = rt.engine.candidate();
    serde_json::json!({
        "generation": s.generation,
        "stable": s.stable,
        "candidate": s.candidate,
        "stats": live.map(|c| c.stats.snapshot()),
        "policy": rt.control.policy,
        "history": s.history.iter().rev().take(100).collect::<Vec<_>>(),
    })
}

async fn rollout_get(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let s = rt.control.store.load().map_err(store)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}

async fn rollout_stage(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let mut r: StageRequest = json_body(&rt, &req, payload).await?;
    r.version = resolve(&rt, &r.version)?;
    let s = rt.control.stage(&rt.host(), &who, r)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    version: String,
}

async fn rollout_approve(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Approver)?;
    let a: Approve = json_body(&rt, &req, payload).await?;
    let v = resolve(&rt, &a.version)?;
    let s = rt.control.approve(&rt.host(), &who, &v)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Rollback {
    reason: String,
}

async fn rollout_rollback(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let body = read_body(&rt, &req, payload, MAX_ADMIN_BODY).await?;
    let r: Rollback = if body.iter().all(u8::is_ascii_whitespace) {
        Rollback::default()
    } else {
        serde_json::from_slice(&body).map_err(crate::error::json_error)?
    };
    let reason = if r.reason.is_empty() {
        "manual rollback".to_string()
    } else {
        r.reason.chars().take(1000).collect()
    };
    let s = rt.control.rollback(&rt.host(), &who, &reason)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}

// ---- lists ----

async fn lists_get(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let s = rt.control.store.load().map_err(store)?;
    let now = now_ms();
    let entries: Vec<_> = s
        .lists
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["expired"] = serde_json::json!(e.expires_ms.is_some_and(|t| t <= now));
            v
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "version": s.lists_version,
        "entries": entries,
    })))
}

async fn lists_add(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let e: NewListEntry = json_body(&rt, &req, payload).await?;
    let entry = rt.control.add_list_entry(&rt.host(), &who, e)?;
    Ok(HttpResponse::Created().json(entry))
}

async fn lists_remove(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let id: u64 = path
        .parse()
        .map_err(|_| ApiError::new(400, "INVALID_FIELD", "the entry id is a number"))?;
    rt.control.remove_list_entry(&rt.host(), &who, id)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "removed": id })))
}

// ---- audit ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    since_ms: Option<i64>,
    /// Entries with a sequence number below this (paging backwards).
    before_seq: Option<u64>,
    limit: Option<usize>,
}

async fn audit(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let q = web::Query::<AuditQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?
        .into_inner();
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::new(400, "INVALID_QUERY", "limit must be 1–1000"));
    }
    let all = rt.control.store.audit().map_err(store)?;
    let entries: Vec<_> = all
        .into_iter()
        .rev()
        .filter(|e| q.actor.as_ref().is_none_or(|a| &e.actor == a))
        .filter(|e| {
            q.action
                .as_ref()
                .is_none_or(|a| e.action == *a || e.action.starts_with(&format!("{a}.")))
        })
        .filter(|e| q.target.as_ref().is_none_or(|t| &e.target == t))
        .filter(|e| q.since_ms.is_none_or(|s| e.time_ms >= s))
        .filter(|e| q.before_seq.is_none_or(|b| e.seq < b))
        .take(limit)
        .collect();
    let next = (entries.len() == limit)
        .then(|| entries.last().map(|e| e.seq))
        .flatten();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "entries": entries,
        "next_before_seq": next,
    })))
}

// ---- settings ----

async fn log_level_get(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "level": crate::runtime::logging::level() })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogLevel {
    level: String,
}

async fn log_level_put(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Admin)?;
    let l: LogLevel = json_body(&rt, &req, payload).await?;
    let before = crate::runtime::logging::level();
    crate::runtime::logging::set_level(&l.level)
        .map_err(|e| ApiError::new(400, "INVALID_FIELD", format!("level: {e}")))?;
    rt.control.audit(
        &who,
        "settings.log-level",
        "log.level",
        Some(before),
        Some(l.level.clone()),
        serde_json::Value::Null,
    );
    Ok(HttpResponse::Ok().json(serde_json::json!({ "level": l.level })))
}

// ---- decisions (read side) ----

#[derive(Deserialize)]
struct RecentQuery {
    limit: Option<usize>,
}

async fn recent(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let q = web::Query::<RecentQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(400, "INVALID_QUERY", e.to_string()))?;
    let limit = q.limit.unwrap_or(100).min(1000);
    Ok(HttpResponse::Ok().json(serde_json::json!({ "decisions": rt.log.recent(limit) })))
}

async fn decisions_query(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    crate::http::query_endpoint(rt, req, false).await
}

async fn stats_query(rt: web::Data<Runtime>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    crate::http::query_endpoint(rt, req, true).await
}

fn method_not_allowed() -> actix_web::Route {
    web::to(crate::error::method_not_allowed)
}

/// Registers the admin routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let r = |path: &str| web::resource(path.to_string()).default_service(method_not_allowed());
    cfg.service(r("/admin/v1/login").route(web::post().to(login)))
        .service(r("/admin/v1/logout").route(web::post().to(logout)))
        .service(r("/admin/v1/session").route(web::get().to(session)))
        .service(r("/admin/v1/decisions/recent").route(web::get().to(recent)))
        .service(r("/admin/v1/decisions").route(web::get().to(decisions_query)))
        .service(r("/admin/v1/stats").route(web::get().to(stats_query)))
        .service(
            r("/admin/v1/rulesets")
                .route(web::get().to(rulesets))
                .route(web::post().to(ruleset_upload)),
        )
        .service(r("/admin/v1/rulesets/current").route(web::get().to(ruleset_current)))
        .service(r("/admin/v1/rulesets/validate").route(web::post().to(ruleset_validate)))
        .service(r("/admin/v1/rulesets/{version}").route(web::get().to(ruleset_get)))
        .service(r("/admin/v1/rulesets/{version}/diff").route(web::get().to(ruleset_diff)))
        .service(r("/admin/v1/rulesets/{version}/regress").route(web::post().to(ruleset_regress)))
        .service(r("/admin/v1/rulesets/{version}/activate").route(web::post().to(ruleset_activate)))
        .service(r("/admin/v1/rulesets/{version}/backtest").route(web::post().to(ruleset_backtest)))
        .service(r("/admin/v1/rulesets/{version}/trace").route(web::post().to(ruleset_trace)))
        .service(r("/admin/v1/settings").route(web::get().to(settings_get)))
        .service(
            r("/admin/v1/rollout")
                .route(web::get().to(rollout_get))
                .route(web::post().to(rollout_stage)),
        )
        .service(r("/admin/v1/rollout/approve").route(web::post().to(rollout_approve)))
        .service(r("/admin/v1/rollout/rollback").route(web::post().to(rollout_rollback)))
        .service(
            r("/admin/v1/lists")
                .route(web::get().to(lists_get))
                .route(web::post().to(lists_add)),
        )
        .service(r("/admin/v1/lists/{id}").route(web::delete().to(lists_remove)))
        .service(r("/admin/v1/audit").route(web::get().to(audit)))
        .service(
            r("/admin/v1/settings/log-level")
                .route(web::get().to(log_level_get))
                .route(web::put().to(log_level_put)),
        );
}
