//! Rule set versions: `GET|POST /admin/v1/rulesets` (list, upload a signed bundle), the live set
//! (`current`), one version, its diff against another, a draft's validation, and activating a
//! version that was stable before.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::rollout::view as rollout_view;
use super::{authorize, resolve, store, MAX_ADMIN_BODY};
use crate::auth::Role;
use crate::error::ApiError;
use crate::http::read_body;
use crate::runtime::Runtime;

pub(super) async fn list(
    rt: web::Data<Runtime>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Viewer)?;
    let versions = rt.control.store.versions().map_err(store)?;
    let state = rt.control.store.load().map_err(store)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "stable": state.stable,
        "candidate": state.candidate,
        "versions": versions,
    })))
}

pub(super) async fn current(
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
pub(super) async fn upload(
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

pub(super) async fn get(
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

pub(super) async fn diff(
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateRequest {
    files: BTreeMap<String, String>,
}

/// Compiles a set without storing it: the console's editor checks a draft with this.
pub(super) async fn validate(
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

pub(super) async fn activate(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = authorize(&rt, &req, Role::Author)?;
    let v = resolve(&rt, &path)?;
    let s = rt.control.activate(&rt.host(), &who, &v)?;
    Ok(HttpResponse::Ok().json(rollout_view(&rt, &s)))
}
