//! The OpenAPI 3 document served at `GET /openapi.json`, generated with `utoipa` from the request
//! and answer types themselves (`DecideRequest`, `DecisionOut`, `StageRequest`, …): a field added
//! to a type shows up here without anyone editing a spec.
//!
//! The operations are declared below, one item per route, next to nothing else so the handlers stay
//! plain actix functions. A test (`tests/api.rs`) reads the route registrations in `http/mod.rs` and
//! `admin/mod.rs` and fails when a route is missing here or an operation here is not served, so the
//! document cannot drift from the router.

#![allow(dead_code)] // The items exist for their generated `__path_*` descriptions.

use rampart_core::model::{ClientInfo, DecideRequest, JudgedRequest, Reason, ShadowHit};
use rampart_core::rollout::{CanaryFilter, ListAction, ListKind};
use rampart_core::{Action, Code};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::control::{
    BreakerRepair, CreatedKey, LimitReset, NewKey, NewListEntry, PoolRefill, RetiredKey,
    StageRequest,
};
use crate::http::{DecisionOut, Outcome, RulesetRef};

/// An error of the call itself.
#[derive(ToSchema)]
pub struct ErrorBody {
    error: ErrorDetail,
}

#[derive(ToSchema)]
pub struct ErrorDetail {
    /// Stable code, e.g. `MALFORMED_JSON`, `UNKNOWN_APP`, `FORBIDDEN`.
    code: String,
    message: String,
    /// Extra data, e.g. located rule errors for `RULESET_INVALID`.
    #[schema(value_type = Option<Object>)]
    details: Option<serde_json::Value>,
}

/// `GET /v1/time`.
#[derive(ToSchema)]
pub struct TimeAnswer {
    /// Server time, Unix ms.
    server_time_ms: i64,
}

/// `POST /admin/v1/login`.
#[derive(ToSchema)]
pub struct LoginBody {
    user: String,
    password: String,
}

/// `POST /admin/v1/rulesets` in dev mode (`[admin] allow_unsigned_uploads`); otherwise the body
/// is a signed `rampart-bundle/1` document (docs/api.md).
#[derive(ToSchema)]
pub struct UploadBody {
    /// Path in the rule directory (`edge/x.rhai`, `lists/y.txt`) → file text.
    #[schema(value_type = Object)]
    files: std::collections::BTreeMap<String, String>,
    message: Option<String>,
}

/// `POST /admin/v1/rollout/approve`.
#[derive(ToSchema)]
pub struct ApproveBody {
    version: String,
}

/// `POST /admin/v1/rulesets/{version}/backtest`.
#[derive(ToSchema)]
pub struct BacktestBody {
    /// 0 < hours ≤ 168 (default 1).
    hours: Option<f64>,
    /// 1–1,000,000 (default 100,000).
    max_rows: Option<usize>,
    /// Examples of changed decisions (default 20).
    examples: Option<usize>,
}

/// `POST /admin/v1/rulesets/{version}/regress`.
#[derive(ToSchema)]
pub struct RegressBody {
    /// Extra samples in the `rules/samples/` format.
    #[schema(value_type = Vec<Object>)]
    samples: Vec<serde_json::Value>,
    /// Compare with this version (default: stable).
    against: Option<String>,
    only_uploaded: Option<bool>,
}

/// `POST /admin/v1/rulesets/validate`.
#[derive(ToSchema)]
pub struct ValidateBody {
    /// Path relative to the rule directory → file text: the whole draft set.
    files: std::collections::BTreeMap<String, String>,
}

/// `POST /admin/v1/rulesets/{version}/trace`: exactly one of the two.
#[derive(ToSchema)]
pub struct TraceBody {
    /// The name of one of the server's samples.
    sample: Option<String>,
    /// A decision row as `GET /admin/v1/decisions` returns it, with its recorded `request`.
    #[schema(value_type = Option<Object>)]
    decision: Option<serde_json::Value>,
}

/// `PUT /admin/v1/settings/log-level`.
#[derive(ToSchema)]
pub struct LogLevelBody {
    /// A tracing filter directive, e.g. `info` or `warn,rampart=debug`.
    level: String,
}

macro_rules! op {
    ($name:ident, $($attr:tt)*) => {
        #[utoipa::path($($attr)*)]
        fn $name() {}
    };
}

op!(
    decide,
    post,
    path = "/v1/decide",
    tag = "decide",
    request_body = DecideRequest,
    responses(
        (
            status = 200,
            description = "The decision",
            body = DecisionOut
        ),
        (
            status = 400,
            description = "Malformed call",
            body = ErrorBody
        ),
        (
            status = 413,
            description = "Body over the limit",
            body = ErrorBody
        )
    )
);
op!(decide_batch, post, path = "/v1/decide/batch", tag = "decide", request_body = Vec<DecideRequest>,
    responses((status = 200, description = "One answer per item, in order (a bad item answers its error object)", body = Vec<DecisionOut>),
              (status = 400, description = "Malformed call", body = ErrorBody)));
op!(
    authz_get,
    get,
    path = "/v1/authz",
    tag = "decide",
    responses(
        (
            status = 200,
            description = "Allow; X-Rampart-Decision, X-Rampart-Code and (once the signature \
                           passed) X-Rampart-Key-Id headers"
        ),
        (
            status = 401,
            description = "Refused: the decision's status and headers"
        ),
        (status = 409, description = "Replay or duplicate")
    )
);
op!(
    authz_post,
    post,
    path = "/v1/authz",
    tag = "decide",
    responses(
        (status = 200, description = "Allow"),
        (status = 403, description = "Refused")
    )
);
op!(
    authz_put,
    put,
    path = "/v1/authz",
    tag = "decide",
    responses((status = 200, description = "Allow"))
);
op!(
    authz_patch,
    patch,
    path = "/v1/authz",
    tag = "decide",
    responses((status = 200, description = "Allow"))
);
op!(
    authz_delete,
    delete,
    path = "/v1/authz",
    tag = "decide",
    responses((status = 200, description = "Allow"))
);
op!(
    authz_head,
    head,
    path = "/v1/authz",
    tag = "decide",
    responses((status = 200, description = "Allow"))
);
op!(
    authz_page_get,
    get,
    path = "/v1/authz-page",
    tag = "decide",
    params(
        ("X-Rampart-Status" = Option<u16>, Header, description = "The refused decision's status (400–599; else 403)"),
        ("X-Rampart-Code" = Option<String>, Header, description = "Its code"),
        ("X-Rampart-Challenge" = Option<String>, Header, description = "Its challenge token: the page solves it"),
        ("X-Rampart-Decision-Id" = Option<String>, Header, description = "Shown as a reference")
    ),
    responses(
        (status = 401, description = "The challenge page (HTML), or a refusal page, with the given status", content_type = "text/html"),
        (status = 403, description = "The same with status 403", content_type = "text/html")
    )
);
op!(
    authz_page_head,
    head,
    path = "/v1/authz-page",
    tag = "decide",
    responses((status = 403, description = "As GET, without the body"))
);
op!(
    authz_tail,
    get,
    path = "/v1/authz/{tail}",
    tag = "decide",
    params((
        "tail" = String,
        Path,
        description = "The original path (Envoy ext_authz appends it)"
    )),
    responses(
        (status = 200, description = "Allow"),
        (status = 403, description = "Refused")
    )
);
op!(
    outcome,
    post,
    path = "/v1/outcome",
    tag = "decide",
    request_body = Outcome,
    responses(
        (status = 200, description = "Recorded"),
        (status = 400, description = "Malformed", body = ErrorBody),
        (status = 401, description = "Not signed by the app (SIGNATURE_MISSING, SIGNATURE_INVALID) with outcome_auth = signed", body = ErrorBody),
        (status = 409, description = "A signed report sent again (REPLAY_DUPLICATE)", body = ErrorBody)
    )
);
op!(
    time,
    get,
    path = "/v1/time",
    tag = "decide",
    responses((status = 200, description = "Server time", body = TimeAnswer))
);
op!(
    healthz,
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive"))
);
op!(
    readyz,
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready"),
        (status = 503, description = "Starting, or waiting for Redis")
    )
);
op!(
    metrics,
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text format"))
);
op!(
    openapi_json,
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document"))
);

op!(
    login,
    post,
    path = "/admin/v1/login",
    tag = "admin",
    request_body = LoginBody,
    responses(
        (
            status = 200,
            description = "Session cookie set; the answer carries the CSRF token"
        ),
        (status = 401, body = ErrorBody),
        (
            status = 429,
            description = "LOGIN_THROTTLED",
            body = ErrorBody
        )
    )
);
op!(
    logout,
    post,
    path = "/admin/v1/logout",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((status = 200, description = "Session revoked"))
);
op!(
    session,
    get,
    path = "/admin/v1/session",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "Who is calling, with which role"
    ))
);
op!(recent, get, path = "/admin/v1/decisions/recent", tag = "admin", security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("limit" = Option<usize>, Query, description = "At most 1000")),
    responses((status = 200, description = "Newest decisions of this instance")));
op!(
    decisions,
    get,
    path = "/admin/v1/decisions",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 200, description = "A page of the decision log"),
        (status = 400, body = ErrorBody)
    )
);
op!(
    stats,
    get,
    path = "/admin/v1/stats",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (
            status = 200,
            description = "Series, breakdown and latency percentiles"
        ),
        (status = 400, body = ErrorBody)
    )
);
op!(
    rulesets,
    get,
    path = "/admin/v1/rulesets",
    tag = "rules",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "Stable, candidate and every version"
    ))
);
op!(
    ruleset_upload,
    post,
    path = "/admin/v1/rulesets",
    tag = "rules",
    request_body = UploadBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 201, description = "New version stored"),
        (status = 200, description = "Known content"),
        (
            status = 400,
            description = "BUNDLE_INVALID, BUNDLE_TAMPERED or BUNDLE_SIGNATURE_INVALID",
            body = ErrorBody
        ),
        (
            status = 403,
            description = "BUNDLE_UNTRUSTED_KEY, or BUNDLE_UNSIGNED outside dev mode",
            body = ErrorBody
        ),
        (
            status = 422,
            description = "RULESET_INVALID with located errors",
            body = ErrorBody
        )
    )
);
op!(
    ruleset_current,
    get,
    path = "/admin/v1/rulesets/current",
    tag = "rules",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "The live set's rules and counters, and the candidate"
    ))
);
op!(
    ruleset_get,
    get,
    path = "/admin/v1/rulesets/{version}",
    tag = "rules",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params((
        "version" = String,
        Path,
        description = "A version, `stable` or `candidate`"
    )),
    responses(
        (status = 200, description = "Metadata and files"),
        (status = 404, body = ErrorBody)
    )
);
op!(ruleset_diff, get, path = "/admin/v1/rulesets/{version}/diff", tag = "rules", security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("version" = String, Path), ("against" = Option<String>, Query, description = "Default: stable")),
    responses((status = 200, description = "Unified diffs per file")));
op!(
    ruleset_regress,
    post,
    path = "/admin/v1/rulesets/{version}/regress",
    tag = "rules",
    request_body = RegressBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("version" = String, Path)),
    responses(
        (
            status = 200,
            description = "Rates, rule hits, failures, changed samples"
        ),
        (status = 400, body = ErrorBody)
    )
);
op!(
    ruleset_backtest,
    post,
    path = "/admin/v1/rulesets/{version}/backtest",
    tag = "rules",
    request_body = BacktestBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("version" = String, Path)),
    responses(
        (
            status = 200,
            description = "Would-change counts by action and rule, with examples"
        ),
        (status = 400, body = ErrorBody)
    )
);
op!(
    ruleset_validate,
    post,
    path = "/admin/v1/rulesets/validate",
    tag = "rules",
    request_body = ValidateBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (
            status = 200,
            description = "`valid`, the content `version`, the `rules` it would run, located `problems`; nothing is stored"
        ),
        (status = 400, body = ErrorBody)
    )
);
op!(
    ruleset_trace,
    post,
    path = "/admin/v1/rulesets/{version}/trace",
    tag = "rules",
    request_body = TraceBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("version" = String, Path)),
    responses(
        (
            status = 200,
            description =
                "The outcome and its trace: every step and rule with its outcome and time"
        ),
        (status = 400, body = ErrorBody),
        (
            status = 404,
            description = "VERSION_NOT_FOUND, or NOT_FOUND for an unknown sample",
            body = ErrorBody
        ),
        (status = 422, body = ErrorBody)
    )
);
op!(
    settings_get,
    get,
    path = "/admin/v1/settings",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "The running configuration without secrets, and the log level"
    ))
);
op!(
    ruleset_activate,
    post,
    path = "/admin/v1/rulesets/{version}/activate",
    tag = "rollout",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("version" = String, Path)),
    responses(
        (status = 200, description = "Stable again"),
        (
            status = 409,
            description = "NOT_APPROVED or ALREADY_STABLE",
            body = ErrorBody
        )
    )
);
op!(
    rollout_get,
    get,
    path = "/admin/v1/rollout",
    tag = "rollout",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "Stable, candidate, per-arm counts, policy, history"
    ))
);
op!(
    rollout_stage,
    post,
    path = "/admin/v1/rollout",
    tag = "rollout",
    request_body = StageRequest,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (
            status = 200,
            description = "The candidate runs in shadow or canary"
        ),
        (status = 409, body = ErrorBody)
    )
);
op!(
    rollout_approve,
    post,
    path = "/admin/v1/rollout/approve",
    tag = "rollout",
    request_body = ApproveBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 200, description = "Promoted to stable"),
        (status = 403, description = "FOUR_EYES", body = ErrorBody)
    )
);
op!(
    rollout_rollback,
    post,
    path = "/admin/v1/rollout/rollback",
    tag = "rollout",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 200, description = "Everyone back on stable"),
        (status = 409, description = "NO_CANDIDATE", body = ErrorBody)
    )
);
op!(
    lists_get,
    get,
    path = "/admin/v1/lists",
    tag = "lists",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((status = 200, description = "Block and allow list entries"))
);
op!(
    lists_add,
    post,
    path = "/admin/v1/lists",
    tag = "lists",
    request_body = NewListEntry,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 201, description = "Added"),
        (status = 400, body = ErrorBody)
    )
);
op!(
    lists_remove,
    delete,
    path = "/admin/v1/lists/{id}",
    tag = "lists",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("id" = u64, Path)),
    responses(
        (status = 200, description = "Removed"),
        (status = 404, body = ErrorBody)
    )
);
op!(
    limits_reset,
    post,
    path = "/admin/v1/limits/reset",
    tag = "admin",
    request_body = LimitReset,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (
            status = 200,
            description = "Cleared here and, within poll_ms, on every instance (audited)"
        ),
        (status = 400, body = ErrorBody),
        (
            status = 503,
            description = "The store cannot be reached",
            body = ErrorBody
        )
    )
);
op!(
    breakers_get,
    get,
    path = "/admin/v1/breakers",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((status = 200, description = "This instance's circuit breakers: state, error and slow ratios, when an open one probes"))
);
op!(
    breakers_close,
    post,
    path = "/admin/v1/breakers/close",
    tag = "admin",
    request_body = BreakerRepair,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (
            status = 200,
            description = "Closed here and, within poll_ms, on every instance (audited)"
        ),
        (status = 400, body = ErrorBody)
    )
);
op!(
    breakers_open,
    post,
    path = "/admin/v1/breakers/open",
    tag = "admin",
    request_body = BreakerRepair,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 200, description = "Opened here and, within poll_ms, on every instance, for for_ms or until closed (audited)"),
        (status = 400, body = ErrorBody)
    )
);
op!(
    repairs_list,
    get,
    path = "/admin/v1/repairs",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((
        status = 200,
        description = "The last repairs recorded, newest first (at most 256)"
    ))
);
op!(
    hot_keys,
    get,
    path = "/admin/v1/hot-keys",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("limit" = Option<u32>, Query, description = "How many keys, 1–100 (default 20)")),
    responses(
        (status = 200, description = "The rate-limit and counter keys this instance's live decisions called most over the current minute and the one before (Space-Saving summaries: calls never undercounted, overcounted by at most `error`), with the calls a rate limit refused"),
        (status = 400, body = ErrorBody)
    )
);
op!(
    pools_get,
    get,
    path = "/admin/v1/pools/{pool}",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params((
        "pool" = String,
        Path,
        description = "The pool as the rule names it in `claim`"
    )),
    responses(
        (
            status = 200,
            description = "Claims granted (per stock segment on Redis) and refills"
        ),
        (
            status = 503,
            description = "The store cannot be reached",
            body = ErrorBody
        )
    )
);
op!(
    pools_refill,
    post,
    path = "/admin/v1/pools/{pool}/refill",
    tag = "admin",
    request_body = PoolRefill,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("pool" = String, Path, description = "The pool as the rule names it in `claim`")),
    responses(
        (status = 200, description = "Refilled (once on shared state; here and, within poll_ms, on every instance with local state; audited)"),
        (status = 400, body = ErrorBody),
        (status = 503, description = "The store cannot be reached", body = ErrorBody)
    )
);
op!(
    subjects_get,
    get,
    path = "/admin/v1/subjects/{kind}/{value}",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(
        ("kind" = String, Path, description = "ip, user, device or ja3"),
        ("value" = String, Path, description = "The address, user id, device id or JA3 hash")
    ),
    responses(
        (status = 200, description = "The subject's reputation, the list entries that cover it, the rate limits keyed by it with what each would allow now, and its last decisions (a day, 20 at most)"),
        (status = 400, body = ErrorBody)
    )
);
op!(
    subjects_reset_reputation,
    post,
    path = "/admin/v1/subjects/{kind}/{value}/reputation/reset",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("kind" = String, Path), ("value" = String, Path)),
    responses(
        (
            status = 200,
            description = "Forgotten: the points before, and 0 (audited)"
        ),
        (status = 400, body = ErrorBody),
        (
            status = 503,
            description = "The store cannot be reached",
            body = ErrorBody
        )
    )
);
op!(
    audit,
    get,
    path = "/admin/v1/audit",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((status = 200, description = "Audit entries, newest first"))
);
op!(
    log_level_get,
    get,
    path = "/admin/v1/settings/log-level",
    tag = "admin",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses((status = 200, description = "The current filter directive"))
);
op!(
    log_level_put,
    put,
    path = "/admin/v1/settings/log-level",
    tag = "admin",
    request_body = LogLevelBody,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    responses(
        (status = 200, description = "Changed on this instance"),
        (status = 400, body = ErrorBody)
    )
);

op!(
    keys_list,
    get,
    path = "/admin/v1/apps/{app}/keys",
    tag = "keys",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("app" = String, Path)),
    responses(
        (
            status = 200,
            description = "The app's keys (ids, validity, state, uses and last use on this \
                           instance; never a secret), pending and retired ids"
        ),
        (status = 404, description = "UNKNOWN_APP", body = ErrorBody)
    )
);
op!(
    keys_add,
    post,
    path = "/admin/v1/apps/{app}/keys",
    tag = "keys",
    request_body = NewKey,
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("app" = String, Path)),
    responses(
        (
            status = 201,
            description = "Added on every instance within [admin] poll_ms; the generated secret \
                           is in this answer only",
            body = CreatedKey
        ),
        (
            status = 400,
            description = "INVALID_FIELD",
            body = ErrorBody
        ),
        (status = 404, description = "UNKNOWN_APP", body = ErrorBody),
        (
            status = 409,
            description = "KEY_EXISTS, KEY_RETIRED or KEY_LIMIT",
            body = ErrorBody
        )
    )
);
op!(
    keys_retire_query,
    delete,
    path = "/admin/v1/apps/{app}/keys",
    tag = "keys",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("app" = String, Path), ("id" = String, Query)),
    responses(
        (
            status = 200,
            description = "Retired on every instance",
            body = RetiredKey
        ),
        (
            status = 404,
            description = "KEY_NOT_FOUND",
            body = ErrorBody
        ),
        (status = 409, description = "KEY_RETIRED", body = ErrorBody)
    )
);
op!(
    keys_retire,
    delete,
    path = "/admin/v1/apps/{app}/keys/{id}",
    tag = "keys",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("app" = String, Path), ("id" = String, Path)),
    responses(
        (
            status = 200,
            description = "Retired on every instance",
            body = RetiredKey
        ),
        (
            status = 404,
            description = "KEY_NOT_FOUND",
            body = ErrorBody
        ),
        (status = 409, description = "KEY_RETIRED", body = ErrorBody)
    )
);
op!(
    keys_approve,
    post,
    path = "/admin/v1/apps/{app}/keys/{id}/approve",
    tag = "keys",
    security(("session" = []), ("bearer" = []), ("basic" = [])),
    params(("app" = String, Path), ("id" = String, Path)),
    responses(
        (status = 200, description = "The pending key is accepted"),
        (
            status = 403,
            description = "FOUR_EYES: the admin who added it",
            body = ErrorBody
        ),
        (status = 409, description = "NOT_PENDING", body = ErrorBody)
    )
);

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        c.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
        c.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::SESSION_COOKIE,
                "From POST /admin/v1/login; state-changing calls also send x-csrf-token",
            ))),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Rampart", description = "Contract v1 and the admin API of the Rampart risk-control engine."),
    paths(
        decide, decide_batch, authz_get, authz_post, authz_put, authz_patch, authz_delete, authz_head,
        authz_tail, authz_page_get, authz_page_head, outcome, time, healthz, readyz, metrics, openapi_json, login, logout, session,
        recent, decisions, stats, rulesets, ruleset_upload, ruleset_current, ruleset_get,
        ruleset_diff, ruleset_regress, ruleset_backtest, ruleset_validate, ruleset_trace,
        ruleset_activate, settings_get, rollout_get,
        rollout_stage, rollout_approve, rollout_rollback, lists_get, lists_add, lists_remove,
        audit, subjects_get, subjects_reset_reputation, limits_reset, breakers_get, breakers_close,
        breakers_open, repairs_list, hot_keys, pools_get, pools_refill, log_level_get, log_level_put, keys_list, keys_add, keys_retire_query, keys_retire,
        keys_approve
    ),
    components(schemas(
        DecideRequest, JudgedRequest, ClientInfo, DecisionOut, RulesetRef, Action, Code, Reason,
        ShadowHit, ErrorBody, ErrorDetail, Outcome, TimeAnswer, StageRequest, CanaryFilter,
        NewListEntry, ListAction, ListKind, NewKey, CreatedKey, RetiredKey, LimitReset, BreakerRepair, PoolRefill
    )),
    modifiers(&Security)
)]
struct ApiDoc;

/// The document, as served.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc.to_json().unwrap_or_else(|_| "{}".into())
}
