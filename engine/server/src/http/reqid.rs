//! Request ids: every HTTP request gets one — the caller's `x-request-id` when it is a sane token,
//! else a new one — echoed in the `x-request-id` response header and carried by a tracing span,
//! so every log line written while serving the request (JSON logs: `span.request_id`) names it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;

static COUNTER: AtomicU64 = AtomicU64::new(0);
static PREFIX: OnceLock<String> = OnceLock::new();

/// A new id: a per-process random prefix and a counter (unique, cheap, sortable per process).
fn new_id() -> String {
    let p = PREFIX.get_or_init(|| {
        let mut b = [0u8; 4];
        let _ = getrandom::getrandom(&mut b);
        hex::encode(b)
    });
    format!("{p}-{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Accepts a caller's id of 1–128 characters of `[A-Za-z0-9._:-]` (nothing that could forge a log
/// line or a header).
fn sane(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| sane(v))
        .map(str::to_string)
        .unwrap_or_else(new_id);
    let span = tracing::info_span!("request", request_id = %id);
    let mut res = next.call(req).instrument(span).await?;
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut()
            .insert(HeaderName::from_static("x-request-id"), v);
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_unique_and_caller_ids_are_checked() {
        let (a, b) = (super::new_id(), super::new_id());
        assert_ne!(a, b);
        assert!(super::sane(&a));
        assert!(super::sane("req-42.a:b_c"));
        assert!(!super::sane("a b"));
        assert!(!super::sane("x\ny"));
        assert!(!super::sane(&"x".repeat(129)));
    }
}
