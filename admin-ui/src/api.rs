//! The admin API from the browser: same-origin fetches that carry the session cookie, with the
//! session's CSRF token on every call that changes something. Answers are JSON; errors are the
//! API's envelope `{"error": {"code", "message", "details"}}`.

use std::cell::RefCell;

use gloo_net::http::{Method, RequestBuilder};
use serde_json::Value;

thread_local! {
    static CSRF: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Remembers the session's CSRF token (from the login answer or `GET /admin/v1/session`).
pub fn set_csrf(token: &str) {
    CSRF.with(|c| *c.borrow_mut() = token.to_string());
}

const REMEMBER: &str = "rampart-logged-in";

/// Notes in this tab's session storage whether it holds a session (the cookie itself is
/// `HttpOnly`, out of the script's reach).
pub fn remember(on: bool) {
    if let Some(s) = web_sys::window().and_then(|w| w.session_storage().ok().flatten()) {
        let _ = if on {
            s.set_item(REMEMBER, "1")
        } else {
            s.remove_item(REMEMBER)
        };
    }
}

pub fn remembered() -> bool {
    web_sys::window()
        .and_then(|w| w.session_storage().ok().flatten())
        .and_then(|s| s.get_item(REMEMBER).ok().flatten())
        .is_some()
}

/// An API error as the console shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiErr {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub details: Value,
}

impl std::fmt::Display for ApiErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

fn network(e: impl std::fmt::Display) -> ApiErr {
    ApiErr {
        status: 0,
        code: "NETWORK".into(),
        message: e.to_string(),
        details: Value::Null,
    }
}

async fn run(method: Method, path: &str, body: Option<&Value>) -> Result<Value, ApiErr> {
    let mut b = RequestBuilder::new(path).method(method.clone());
    if method != Method::GET {
        let token = CSRF.with(|c| c.borrow().clone());
        b = b.header("x-csrf-token", &token);
    }
    let resp = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(v.to_string())
            .map_err(network)?
            .send()
            .await
            .map_err(network)?,
        None => b.send().await.map_err(network)?,
    };
    let status = resp.status();
    let text = resp.text().await.map_err(network)?;
    let json: Value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    if status == 401 && path != "/admin/v1/login" {
        // The session ended (expired, logged out elsewhere): back to the login form.
        remember(false);
        if let Some(w) = web_sys::window() {
            let _ = w.location().reload();
        }
    }
    if (200..300).contains(&status) {
        Ok(json)
    } else {
        let e = &json["error"];
        Err(ApiErr {
            status,
            code: e["code"].as_str().unwrap_or("HTTP_ERROR").to_string(),
            message: e["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("HTTP {status}")),
            details: e["details"].clone(),
        })
    }
}

pub async fn get(path: &str) -> Result<Value, ApiErr> {
    run(Method::GET, path, None).await
}

pub async fn post(path: &str, body: &Value) -> Result<Value, ApiErr> {
    run(Method::POST, path, Some(body)).await
}

pub async fn put(path: &str, body: &Value) -> Result<Value, ApiErr> {
    run(Method::PUT, path, Some(body)).await
}

pub async fn delete(path: &str) -> Result<Value, ApiErr> {
    run(Method::DELETE, path, None).await
}

/// `GET /metrics` as text (public, not JSON).
pub async fn metrics() -> Result<String, ApiErr> {
    let resp = RequestBuilder::new("/metrics")
        .send()
        .await
        .map_err(network)?;
    resp.text().await.map_err(network)
}

/// Percent-encodes a query value.
pub fn enc(s: &str) -> String {
    js_sys::encode_uri_component(s).into()
}
