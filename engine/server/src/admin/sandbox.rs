//! Trying a version without running it: regressions over the samples
//! (`POST /admin/v1/rulesets/{version}/regress`), backtests over the recorded decisions
//! (`…/backtest`) and traces of one sample or one recorded decision (`…/trace`). Each runs in a
//! fresh world: nothing live is touched.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use super::{authorize, json_body_or_default, resolve, MAX_ADMIN_BODY};
use crate::auth::Role;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::http::read_body;
use crate::runtime::Runtime;

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

pub(super) async fn regress(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let r: RegressRequest = json_body_or_default(&rt, &req, payload).await?;
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

pub(super) async fn backtest(
    rt: web::Data<Runtime>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&rt, &req, Role::Author)?;
    let b: BacktestRequest = json_body_or_default(&rt, &req, payload).await?;
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
struct TraceRequest {
    /// The name of one of the server's samples.
    sample: Option<String>,
    /// A decision as `GET /admin/v1/decisions` returns it (with its recorded `request`).
    decision: Option<serde_json::Value>,
}

/// One sample, or one recorded decision, through `{version}` with a trace of every step and rule.
pub(super) async fn trace(
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
