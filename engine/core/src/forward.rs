//! Forward-auth: the decide request that a proxy's check request describes (nginx
//! `auth_request`, Envoy `ext_authz` HTTP service, Traefik `ForwardAuth`). Pure, so that it can be
//! fuzzed: every header comes from the proxy, and most of them from the end user.

use std::collections::HashMap;

use crate::model::{DecideRequest, JudgedRequest};

/// The check request as the server received it.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    /// Header names (any case) and values; values that are not UTF-8 are left out by the caller.
    pub headers: &'a [(&'a str, &'a str)],
    /// The check request's own method.
    pub method: &'a str,
    /// The check request's own path and query (`/v1/authz/orders?id=1`).
    pub path_and_query: &'a str,
    /// The TCP peer.
    pub peer_ip: Option<&'a str>,
}

/// Why a check request describes no decide request (answered `400 INVALID_FIELD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("forward-auth needs the X-App header")]
    NoApp,
    #[error("the original URI must be an absolute path")]
    NotAbsolute,
    #[error("the header {0} appears more than once")]
    DuplicateHeader(&'static str),
}

impl ForwardError {
    /// The stable code of the API error this is answered with.
    pub fn code(&self) -> &'static str {
        match self {
            ForwardError::NoApp | ForwardError::NotAbsolute => "INVALID_FIELD",
            ForwardError::DuplicateHeader(_) => "DUPLICATE_HEADER",
        }
    }
}

/// Headers a check request may carry once only: the app, and the anti-replay headers.
const SINGLE_HEADERS: [&str; 5] = [
    "x-app",
    "x-timestamp",
    "x-nonce",
    "x-signature",
    "x-content-sha256",
];

impl CheckRequest<'_> {
    /// The first non-empty value of `name` (trimmed).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
            .find(|v| !v.is_empty())
    }

    /// The decide request: the original method and URI from `X-Original-*` (nginx) or
    /// `X-Forwarded-*` (Traefik), else the check request's own after `/v1/authz` (Envoy); the
    /// client from the first `X-Forwarded-For` entry, `X-Real-IP`, else the peer; user, device and
    /// client attributes from `X-User-Id`, `X-Device-Id`, `X-Ja3`, `X-Country`, `X-Isp`,
    /// `X-Device-Type`; every header for the signature and the rules. Proxies do not forward the
    /// body: the client's declared `X-Content-SHA256` stands for it.
    pub fn to_decide(&self) -> Result<DecideRequest, ForwardError> {
        for name in SINGLE_HEADERS {
            let n = self
                .headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .count();
            if n > 1 {
                return Err(ForwardError::DuplicateHeader(name));
            }
        }
        let app = self.header("x-app").ok_or(ForwardError::NoApp)?;
        let method = self
            .header("x-original-method")
            .or_else(|| self.header("x-forwarded-method"))
            .unwrap_or(self.method)
            .to_string();
        let uri = match self
            .header("x-original-uri")
            .or_else(|| self.header("x-forwarded-uri"))
        {
            Some(u) => u.to_string(),
            None => {
                let full = self.path_and_query;
                let rest = full.strip_prefix("/v1/authz").unwrap_or(full);
                if rest.is_empty() || rest.starts_with('?') {
                    format!("/{rest}")
                } else {
                    rest.to_string()
                }
            }
        };
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (uri, String::new()),
        };
        if !path.starts_with('/') {
            return Err(ForwardError::NotAbsolute);
        }
        let ip = self
            .header("x-forwarded-for")
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .or_else(|| self.header("x-real-ip"))
            .or(self.peer_ip)
            .map(str::to_string);
        // Last value wins, as in a header map.
        let headers: HashMap<String, String> = self
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
            .collect();
        let owned = |name: &str| self.header(name).map(str::to_string);
        let mut d = DecideRequest {
            app: app.to_string(),
            request: JudgedRequest {
                method,
                path,
                query,
                body_sha256: owned("x-content-sha256"),
                headers,
                body: None,
                raw_path: None,
            },
            user_id: owned("x-user-id"),
            ..Default::default()
        };
        let c = &mut d.client;
        c.ip = ip;
        c.device_id = owned("x-device-id");
        c.ja3 = owned("x-ja3");
        c.country = owned("x-country");
        c.isp = owned("x-isp");
        c.device_type = owned("x-device-type");
        c.user_agent = owned("user-agent");
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<'a>(headers: &'a [(&'a str, &'a str)], pq: &'a str) -> CheckRequest<'a> {
        CheckRequest {
            headers,
            method: "GET",
            path_and_query: pq,
            peer_ip: Some("10.0.0.1"),
        }
    }

    #[test]
    fn nginx_traefik_and_envoy_shapes() {
        let h = [
            ("X-App", "shop"),
            ("X-Original-Method", "POST"),
            ("X-Original-URI", "/api/orders?id=7"),
            ("X-Forwarded-For", " 198.51.100.7 , 10.0.0.2"),
            ("X-User-Id", "u1"),
        ];
        let d = check(&h, "/v1/authz").to_decide().unwrap();
        assert_eq!(
            (
                d.app.as_str(),
                d.request.method.as_str(),
                d.request.path.as_str()
            ),
            ("shop", "POST", "/api/orders")
        );
        assert_eq!(d.request.query, "id=7");
        assert_eq!(d.client.ip.as_deref(), Some("198.51.100.7"));
        assert_eq!(d.user_id.as_deref(), Some("u1"));
        assert_eq!(d.request.headers["x-app"], "shop");

        let h = [
            ("x-app", "shop"),
            ("x-forwarded-uri", "/t"),
            ("x-real-ip", "192.0.2.1"),
        ];
        let d = check(&h, "/v1/authz").to_decide().unwrap();
        assert_eq!(
            (d.request.path.as_str(), d.client.ip.as_deref()),
            ("/t", Some("192.0.2.1"))
        );

        let h = [("x-app", "shop")];
        let d = check(&h, "/v1/authz/orders/9?x=1").to_decide().unwrap();
        assert_eq!(
            (d.request.path.as_str(), d.request.query.as_str()),
            ("/orders/9", "x=1")
        );
        assert_eq!(d.client.ip.as_deref(), Some("10.0.0.1"));
        let d = check(&h, "/v1/authz?x=1").to_decide().unwrap();
        assert_eq!(
            (d.request.path.as_str(), d.request.query.as_str()),
            ("/", "x=1")
        );
    }

    #[test]
    fn bad_check_requests_are_refused_with_a_reason() {
        assert_eq!(
            check(&[], "/v1/authz").to_decide().unwrap_err(),
            ForwardError::NoApp
        );
        assert_eq!(
            check(&[("x-app", "  ")], "/v1/authz")
                .to_decide()
                .unwrap_err(),
            ForwardError::NoApp
        );
        let h = [("x-app", "a"), ("x-original-uri", "http://evil/x")];
        assert_eq!(
            check(&h, "/v1/authz").to_decide().unwrap_err(),
            ForwardError::NotAbsolute
        );
        // An empty X-Forwarded-For entry falls through to the next source.
        let h = [("x-app", "a"), ("x-forwarded-for", ", 1.2.3.4")];
        assert_eq!(
            check(&h, "/v1/authz")
                .to_decide()
                .unwrap()
                .client
                .ip
                .as_deref(),
            Some("10.0.0.1")
        );
    }
}
