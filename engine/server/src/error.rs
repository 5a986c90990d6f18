//! The error of an API call itself (not a decision): `{"error":{"code","message"}}` with a 4xx
//! status, never a 5xx for bad input. Shared by every endpoint, the admin API and the console.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError};

/// An error of the API call itself.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Extra data (e.g. located rule errors), under `error.details`.
    pub details: Option<serde_json::Value>,
    /// Sent as `Retry-After` (seconds, rounded up).
    pub retry_after_ms: Option<i64>,
    /// Close the connection after answering (a client that cannot finish its request).
    pub close: bool,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after_ms: None,
            close: false,
        }
    }

    /// The connection is closed after this answer.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_retry_after(mut self, ms: i64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    pub(crate) fn body(&self) -> serde_json::Value {
        let mut e = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.details {
            e["details"] = d.clone();
        }
        serde_json::json!({ "error": e })
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST)
    }
    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.status_code());
        if self.close {
            r.force_close();
        }
        if let Some(ms) = self.retry_after_ms {
            r.insert_header(("retry-after", ((ms.max(0) + 999) / 1000).to_string()));
        }
        r.json(self.body())
    }
}

impl From<rampart_core::RequestError> for ApiError {
    fn from(e: rampart_core::RequestError) -> Self {
        ApiError::new(e.status(), e.code(), e.to_string())
    }
}

/// A store the operator plane could not read or repair: `503 STORE_UNAVAILABLE`.
impl From<rampart_core::store::StoreError> for ApiError {
    fn from(e: rampart_core::store::StoreError) -> Self {
        ApiError::new(503, "STORE_UNAVAILABLE", e.to_string())
    }
}

/// Maps a JSON parse error to a stable code.
pub(crate) fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let msg = e.to_string();
    if msg.contains("recursion limit") {
        return ApiError::new(
            400,
            "JSON_TOO_DEEP",
            "JSON nesting is deeper than 128 levels",
        );
    }
    match e.classify() {
        Category::Data => ApiError::new(400, "INVALID_FIELD", msg),
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            400,
            "MALFORMED_JSON",
            format!("body is not valid JSON: {msg}"),
        ),
    }
}

pub(crate) async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        404,
        "NOT_FOUND",
        format!("no endpoint {} {}", req.method(), req.path()),
    )
    .error_response()
}

pub(crate) async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        405,
        "METHOD_NOT_ALLOWED",
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}

pub(crate) fn query_error(
    err: actix_web::error::QueryPayloadError,
    _req: &HttpRequest,
) -> actix_web::Error {
    ApiError::new(400, "INVALID_FIELD", format!("bad query string: {err}")).into()
}
