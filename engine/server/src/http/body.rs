//! Request bodies and headers within their limits: the body read with its size bound and its
//! deadline, the header block's size checked before a handler runs.

use crate::error::ApiError;
use crate::runtime::Runtime;
use actix_web::{web, HttpRequest, ResponseError};
use futures_core::Stream as _;

/// Reads a request body of at most `limit` bytes (`413 BODY_TOO_LARGE`), which must arrive whole
/// within `[server] client_body_timeout_ms` (`408 BODY_TIMEOUT`, and the connection is closed): a
/// client that drips its body holds a connection for that long at most.
pub(crate) async fn read_body(
    rt: &Runtime,
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, ApiError> {
    let deadline = rt.limits.body_timeout;
    match tokio::time::timeout(deadline, read_body_unbounded(rt, req, payload, limit)).await {
        Ok(r) => r,
        Err(_) => {
            rt.metrics.api_error("BODY_TIMEOUT");
            Err(ApiError::new(
                408,
                "BODY_TIMEOUT",
                format!(
                    "the request body did not arrive within {} ms",
                    deadline.as_millis()
                ),
            )
            .closing())
        }
    }
}

async fn read_body_unbounded(
    rt: &Runtime,
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, ApiError> {
    let too_large = || {
        rt.metrics.api_error("BODY_TOO_LARGE");
        ApiError::new(
            413,
            "BODY_TOO_LARGE",
            format!("request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    // Read the chunks here rather than with `to_bytes_limited`, which reserves 32 KiB for every
    // body it cannot size (every request body) and made that allocation a visible cost of each
    // decision. A body that arrives in one chunk is kept as it is, without a copy.
    let mut first: Option<web::Bytes> = None;
    let mut joined: Option<web::BytesMut> = None;
    let mut total = 0usize;
    while let Some(chunk) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut payload).poll_next(cx)).await
    {
        let chunk =
            chunk.map_err(|e| ApiError::new(400, "BAD_BODY", format!("cannot read body: {e}")))?;
        total += chunk.len();
        if total > limit {
            return Err(too_large());
        }
        match (&mut joined, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&chunk),
            (None, None) => first = Some(chunk),
            (None, Some(head)) => {
                let mut buf =
                    web::BytesMut::with_capacity(declared.unwrap_or(0).clamp(total, limit));
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&chunk);
                joined = Some(buf);
            }
        }
    }
    Ok(match joined {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

/// Refuses a request whose headers exceed `[server] max_header_bytes` with `431
/// HEADERS_TOO_LARGE`, before any handler reads them.
pub async fn header_limit(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<
    actix_web::dev::ServiceResponse<actix_web::body::EitherBody<impl actix_web::body::MessageBody>>,
    actix_web::Error,
> {
    if let Some(rt) = req.app_data::<web::Data<Runtime>>() {
        let max = rt.limits.max_header_bytes;
        let size: usize = req
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if size > max {
            rt.metrics.api_error("HEADERS_TOO_LARGE");
            let e = ApiError::new(
                431,
                "HEADERS_TOO_LARGE",
                format!("the request headers take {size} bytes; at most {max} are accepted"),
            );
            return Ok(req.into_response(e.error_response()).map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}
