//! `[server]`: the listening address, HTTP limits and timeouts, the challenge status, TLS files.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
    pub max_body_bytes: usize,
    pub max_batch_body_bytes: usize,
    pub max_batch_items: usize,
    /// Largest total of request header names and values (each plus 4 bytes for `: ` and CRLF).
    pub max_header_bytes: usize,
    /// Open connections per worker; more wait in the accept queue.
    pub max_connections: usize,
    /// New TLS-free connections accepted per worker at once (actix-web's handshake limit).
    pub max_connection_rate: usize,
    /// Time a client has to send a whole request head; slower → 408 and the connection closed.
    pub client_request_timeout_ms: u64,
    /// Time a client has to send a whole request body once its head has arrived; slower → 408
    /// and the connection closed.
    pub client_body_timeout_ms: u64,
    /// Time to finish closing a connection after the response; then it is dropped.
    pub client_disconnect_timeout_ms: u64,
    /// Idle keep-alive time of a connection between requests; 0 = no keep-alive.
    pub keep_alive_ms: u64,
    pub challenge_status: u16,
    /// Name of this instance in the decision log; empty = host name.
    pub instance: String,
    /// PEM certificate chain; with `tls_key_file`, the server speaks HTTPS only.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate.
    pub tls_key_file: Option<PathBuf>,
    /// Which proxy sends `/v1/authz` calls: whose headers carry the original method and URI.
    pub proxy_headers: rampart_core::forward::ProxyFamily,
    /// Which hops of `X-Forwarded-For` and the TCP peer of `/v1/authz` are proxies: a number of
    /// hops, or address blocks. Absent: a proxy on loopback.
    pub trusted_proxies: Option<TrustedProxiesConfig>,
    /// A second listening address for the operator plane: the admin API, the console and
    /// `/metrics` move there, and `listen` serves only the decision path. Absent: one listener.
    pub admin_listen: Option<String>,
    /// Whether `POST /v1/outcome` must be signed by the app like a request (`signed`) or is
    /// accepted from anyone who reaches the port (`none`).
    pub outcome_auth: OutcomeAuth,
    /// A bearer token `/metrics` requires (`Authorization: Bearer <token>`); absent = open.
    pub metrics_token: Option<Hidden>,
    /// The environment variable holding `metrics_token`.
    pub metrics_token_env: Option<String>,
}

/// A secret read from the configuration: never shown by `Debug`.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Hidden(pub String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<hidden>\"")
    }
}

/// `[server] outcome_auth`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeAuth {
    /// Signed like a request (`x-timestamp`, `x-nonce`, `x-signature`), used once.
    #[default]
    Signed,
    /// Unauthenticated (contract v1's behaviour): only where the port is private.
    None,
}

/// `[server] trusted_proxies`: `2` (the two right-most hops) or `["10.0.0.0/8", "::1"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TrustedProxiesConfig {
    Hops(u32),
    Nets(Vec<String>),
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            workers: 0,
            max_body_bytes: 64 * 1024,
            max_batch_body_bytes: 1024 * 1024,
            max_batch_items: 100,
            max_header_bytes: 16 * 1024,
            max_connections: 25_000,
            max_connection_rate: 256,
            client_request_timeout_ms: 5_000,
            client_body_timeout_ms: 5_000,
            client_disconnect_timeout_ms: 1_000,
            keep_alive_ms: 5_000,
            challenge_status: 401,
            instance: String::new(),
            tls_cert_file: None,
            tls_key_file: None,
            proxy_headers: Default::default(),
            trusted_proxies: None,
            admin_listen: None,
            outcome_auth: OutcomeAuth::Signed,
            metrics_token: None,
            metrics_token_env: None,
        }
    }
}

impl ServerConfig {
    /// Checks `[server]` (all but the TLS pair, see [`ServerConfig::check_tls_pair`]); every
    /// problem goes into `errs`. Returns the listening address when it parses.
    pub(super) fn check(&self, errs: &mut Vec<String>) -> Option<SocketAddr> {
        let listen = match self.listen.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errs.push(format!(
                    "server.listen {:?} is not an address like 127.0.0.1:8080",
                    self.listen
                ));
                None
            }
        };
        if self.max_body_bytes < 256 {
            errs.push("server.max_body_bytes must be at least 256".into());
        }
        if self.max_batch_body_bytes < self.max_body_bytes {
            errs.push("server.max_batch_body_bytes must be ≥ server.max_body_bytes".into());
        }
        if !(1024..=65_536).contains(&self.max_header_bytes) {
            errs.push("server.max_header_bytes must be 1024–65536".into());
        }
        if self.max_connections == 0 || self.max_connection_rate == 0 {
            errs.push("server.max_connections and server.max_connection_rate must be ≥ 1".into());
        }
        // actix-http measures these against a clock it refreshes every 500 ms: below a second
        // a deadline can already have passed when the head arrives.
        if !(1_000..=60_000).contains(&self.client_request_timeout_ms) {
            errs.push("server.client_request_timeout_ms must be 1000–60000".into());
        }
        if !(100..=60_000).contains(&self.client_body_timeout_ms) {
            errs.push("server.client_body_timeout_ms must be 100–60000".into());
        }
        if self.client_disconnect_timeout_ms > 60_000 {
            errs.push("server.client_disconnect_timeout_ms must be ≤ 60000".into());
        }
        if self.keep_alive_ms > 600_000 {
            errs.push("server.keep_alive_ms must be ≤ 600000".into());
        }
        if self.max_batch_items == 0 {
            errs.push("server.max_batch_items must be at least 1".into());
        }
        if let Some(TrustedProxiesConfig::Nets(nets)) = &self.trusted_proxies {
            for n in nets {
                if rampart_core::forward::IpNet::parse(n).is_none() {
                    errs.push(format!(
                        "server.trusted_proxies: {n:?} is not an address or a block like 10.0.0.0/8"
                    ));
                }
            }
        }
        if matches!(self.trusted_proxies, Some(TrustedProxiesConfig::Hops(n)) if n > 16) {
            errs.push(
                "server.trusted_proxies must be 0–16 hops, or a list of address blocks".into(),
            );
        }
        if ![401, 403].contains(&self.challenge_status) {
            errs.push("server.challenge_status must be 401 or 403".into());
        }
        if let Some(a) = &self.admin_listen {
            match a.parse::<SocketAddr>() {
                Ok(a) if Some(a) == listen => {
                    errs.push("server.admin_listen must differ from server.listen".into())
                }
                Ok(_) => {}
                Err(_) => errs.push(format!(
                    "server.admin_listen {a:?} is not an address like 127.0.0.1:9090"
                )),
            }
        }
        if self.metrics_token.is_some() && self.metrics_token_env.is_some() {
            errs.push("server: set metrics_token or metrics_token_env, not both".into());
        }
        match self.metrics_token() {
            Ok(Some(t)) if t.len() < 16 => {
                errs.push("server.metrics_token must be at least 16 characters".into())
            }
            Err(e) => errs.push(e),
            _ => {}
        }
        listen
    }

    /// The operator plane's address, when `admin_listen` is set (after validation).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_listen.as_deref().and_then(|a| a.parse().ok())
    }

    /// The token `/metrics` requires, if any (read from the environment for `metrics_token_env`).
    pub fn metrics_token(&self) -> Result<Option<String>, String> {
        match (&self.metrics_token, &self.metrics_token_env) {
            (Some(t), _) => Ok(Some(t.0.clone())),
            (None, Some(var)) => std::env::var(var)
                .map(Some)
                .map_err(|_| format!("server.metrics_token_env: ${var} is not set")),
            (None, None) => Ok(None),
        }
    }

    /// What `/v1/authz` believes of the proxy headers (checked by [`ServerConfig::check`]).
    pub fn proxy_trust(&self) -> rampart_core::forward::ProxyTrust {
        use rampart_core::forward::{IpNet, TrustedProxies};
        rampart_core::forward::ProxyTrust {
            family: self.proxy_headers,
            proxies: match &self.trusted_proxies {
                None => TrustedProxies::default(),
                Some(TrustedProxiesConfig::Hops(n)) => TrustedProxies::Hops(*n),
                Some(TrustedProxiesConfig::Nets(v)) => {
                    TrustedProxies::Nets(v.iter().filter_map(|n| IpNet::parse(n)).collect())
                }
            },
        }
    }

    /// The TLS files go together. Checked after every other section, so the problems keep the
    /// order `rampart check` has always printed them in.
    pub(super) fn check_tls_pair(&self, errs: &mut Vec<String>) {
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            errs.push(
                "server.tls_cert_file and server.tls_key_file go together: set both for HTTPS, \
                 or neither"
                    .into(),
            );
        }
    }
}
