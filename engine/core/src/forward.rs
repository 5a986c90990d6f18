//! Forward-auth: the decide request that a proxy's check request describes (nginx
//! `auth_request`, Envoy `ext_authz` HTTP service, Traefik `ForwardAuth`). Pure, so that it can be
//! fuzzed: every header comes from the proxy, and most of them from the end user.

use std::net::IpAddr;

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

/// Which proxy is in front of `/v1/authz`, hence which headers carry the original method and URI
/// (`[server] proxy_headers`). Only that proxy's family is read: a header of another family is
/// whatever the client sent, passed through by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyFamily {
    /// nginx `auth_request`: `X-Original-Method`, `X-Original-URI`.
    #[default]
    Nginx,
    /// Traefik `ForwardAuth`: `X-Forwarded-Method`, `X-Forwarded-Uri`.
    Traefik,
    /// Envoy `ext_authz` (HTTP): the check request's own method, and its path after `/v1/authz`.
    Envoy,
}

impl ProxyFamily {
    pub fn as_str(&self) -> &'static str {
        match self {
            ProxyFamily::Nginx => "nginx",
            ProxyFamily::Traefik => "traefik",
            ProxyFamily::Envoy => "envoy",
        }
    }
}

/// An address block (`10.0.0.0/8`, `::1/128`, or a bare address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Parses `addr` or `addr/prefix`.
    pub fn parse(s: &str) -> Option<IpNet> {
        let (a, p) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(IpNet { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, ip) => ip,
        };
        let (a, b, bits) = match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
            _ => return false,
        };
        let shift = bits - self.prefix as u32;
        shift >= bits || (a >> shift) == (b >> shift)
    }
}

/// Whose addresses the chain of `X-Forwarded-For` entries and the TCP peer is believed from
/// (`[server] trusted_proxies`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustedProxies {
    /// The right-most `n` hops (the TCP peer is the first) are proxies: the client is the hop
    /// before them (the left-most when there are fewer).
    Hops(u32),
    /// Hops whose address is in one of these blocks are proxies: walking from the peer to the
    /// left, the client is the first address outside them (the left-most when all are inside).
    Nets(Vec<IpNet>),
}

impl Default for TrustedProxies {
    /// A proxy on this host (loopback) is trusted, no other.
    fn default() -> Self {
        TrustedProxies::Nets(vec![
            IpNet::parse("127.0.0.0/8").expect("net"),
            IpNet::parse("::1/128").expect("net"),
        ])
    }
}

/// What a check request's proxy headers are believed for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProxyTrust {
    pub family: ProxyFamily,
    pub proxies: TrustedProxies,
}

/// An address of the forwarding chain: a bare address, or one with a port (`1.2.3.4:5`,
/// `[::1]:5`).
fn chain_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split_once(']').and_then(|(a, _)| a.parse().ok());
    }
    s.rsplit_once(':')
        .filter(|(a, _)| !a.contains(':'))
        .and_then(|(a, _)| a.parse().ok())
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

    /// [`CheckRequest::to_decide_trusting`] with the default trust: nginx headers, loopback
    /// proxies.
    /// The value of cookie `name` in the `Cookie` headers (the first one of that name).
    fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("cookie"))
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim().trim_matches('"'))
    }

    /// The client's address as the configured proxies report it: the right-most hop of the
    /// forwarding chain that is not a trusted proxy (see `to_decide_trusting`), the TCP peer when
    /// that peer is not a trusted proxy.
    pub fn client(&self, trust: &TrustedProxies) -> Option<String> {
        self.client_ip(trust)
    }

    pub fn to_decide(&self) -> Result<DecideRequest, ForwardError> {
        self.to_decide_trusting(&ProxyTrust::default())
    }

    /// The client's address: the forwarding chain is every `X-Forwarded-For` entry (else
    /// `X-Real-IP`), then the TCP peer; the right-most address that is not a trusted proxy.
    fn client_ip(&self, trust: &TrustedProxies) -> Option<String> {
        let mut chain: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        if chain.is_empty() {
            chain.extend(self.header("x-real-ip"));
        }
        // Without a peer (an in-process call) the right-most hop is taken to be a proxy.
        let peer = self.peer_ip;
        let mut hops: Vec<Option<&str>> = chain.into_iter().map(Some).collect();
        hops.push(peer);
        let pick = |i: usize| -> Option<String> {
            // An entry that is no address (a proxy wrote garbage) is not believed: the hop to
            // its right, which the next proxy saw, stands for the client.
            hops[i..]
                .iter()
                .flatten()
                .find_map(|h| chain_ip(h))
                .map(|ip| ip.to_string())
        };
        let idx = match trust {
            TrustedProxies::Hops(n) => hops.len().saturating_sub(1 + *n as usize),
            TrustedProxies::Nets(nets) => (0..hops.len())
                .rev()
                .find(|&i| match hops[i] {
                    None => false,
                    Some(h) => match chain_ip(h) {
                        Some(ip) => !nets.iter().any(|n| n.contains(ip)),
                        None => true,
                    },
                })
                .unwrap_or(0),
        };
        pick(idx)
    }

    /// The decide request: the original method and URI from the headers of the proxy family in
    /// `trust` (`X-Original-*` for nginx, `X-Forwarded-*` for Traefik), else the check request's
    /// own after `/v1/authz` (Envoy, and a family header that is missing); the client's address as
    /// the right-most untrusted hop of `X-Forwarded-For` (else `X-Real-IP`) and the TCP peer;
    /// user, device and client attributes from `X-User-Id`, `X-Device-Id`, `X-Ja3`, `X-Country`,
    /// `X-Isp`, `X-Device-Type` (the proxy must set or strip them: see the samples); every header
    /// for the signature and the rules. Proxies do not forward the body: the client's declared
    /// `X-Content-SHA256` stands for it.
    pub fn to_decide_trusting(&self, trust: &ProxyTrust) -> Result<DecideRequest, ForwardError> {
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
        let (method_header, uri_header) = match trust.family {
            ProxyFamily::Nginx => (Some("x-original-method"), Some("x-original-uri")),
            ProxyFamily::Traefik => (Some("x-forwarded-method"), Some("x-forwarded-uri")),
            ProxyFamily::Envoy => (None, None),
        };
        let method = method_header
            .and_then(|h| self.header(h))
            .unwrap_or(self.method)
            .to_string();
        let uri = match uri_header.and_then(|h| self.header(h)) {
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
        let ip = self.client_ip(&trust.proxies);
        // Last value wins, as in a header map.
        let mut headers: crate::model::Headers = self
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
            .collect();
        // A browser's clearance comes as a cookie; the header, when sent too, wins.
        if !headers.contains_key(crate::challenge::CLEARANCE_HEADER) {
            if let Some(c) = self.cookie(crate::challenge::CLEARANCE_COOKIE) {
                headers.insert(crate::challenge::CLEARANCE_HEADER.into(), c.to_string());
            }
        }
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

    fn trust(family: ProxyFamily, proxies: TrustedProxies) -> ProxyTrust {
        ProxyTrust { family, proxies }
    }

    fn nets(list: &[&str]) -> TrustedProxies {
        TrustedProxies::Nets(list.iter().map(|n| IpNet::parse(n).unwrap()).collect())
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
        let t = trust(ProxyFamily::Nginx, nets(&["10.0.0.0/8"]));
        let d = check(&h, "/v1/authz").to_decide_trusting(&t).unwrap();
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
            ("x-forwarded-method", "PUT"),
            ("x-forwarded-uri", "/t"),
            ("x-real-ip", "192.0.2.1"),
        ];
        let t = trust(ProxyFamily::Traefik, TrustedProxies::Hops(1));
        let d = check(&h, "/v1/authz").to_decide_trusting(&t).unwrap();
        assert_eq!(
            (
                d.request.method.as_str(),
                d.request.path.as_str(),
                d.client.ip.as_deref()
            ),
            ("PUT", "/t", Some("192.0.2.1"))
        );

        let h = [("x-app", "shop")];
        let t = trust(ProxyFamily::Envoy, TrustedProxies::default());
        let d = check(&h, "/v1/authz/orders/9?x=1")
            .to_decide_trusting(&t)
            .unwrap();
        assert_eq!(
            (d.request.path.as_str(), d.request.query.as_str()),
            ("/orders/9", "x=1")
        );
        assert_eq!(d.client.ip.as_deref(), Some("10.0.0.1"));
        let d = check(&h, "/v1/authz?x=1").to_decide_trusting(&t).unwrap();
        assert_eq!(
            (d.request.path.as_str(), d.request.query.as_str()),
            ("/", "x=1")
        );
    }

    #[test]
    fn only_the_configured_family_and_the_right_most_untrusted_hop_are_believed() {
        // A client behind nginx sends Traefik's headers: nginx passes them through, they are
        // not read.
        let h = [
            ("x-app", "shop"),
            ("x-original-method", "GET"),
            ("x-original-uri", "/api/items"),
            ("x-forwarded-method", "DELETE"),
            ("x-forwarded-uri", "/admin/wipe"),
        ];
        let d = check(&h, "/v1/authz").to_decide().unwrap();
        assert_eq!(
            (d.request.method.as_str(), d.request.path.as_str()),
            ("GET", "/api/items")
        );
        // A client behind Traefik sends nginx's headers: not read either.
        let h = [
            ("x-app", "shop"),
            ("x-original-method", "DELETE"),
            ("x-original-uri", "/admin/wipe"),
            ("x-forwarded-method", "GET"),
            ("x-forwarded-uri", "/api/items"),
        ];
        let t = trust(ProxyFamily::Traefik, TrustedProxies::default());
        let d = check(&h, "/v1/authz").to_decide_trusting(&t).unwrap();
        assert_eq!(
            (d.request.method.as_str(), d.request.path.as_str()),
            ("GET", "/api/items")
        );
        // Behind Envoy neither family is read.
        let t = trust(ProxyFamily::Envoy, TrustedProxies::default());
        let d = check(&h, "/v1/authz/api/cart")
            .to_decide_trusting(&t)
            .unwrap();
        assert_eq!(
            (d.request.method.as_str(), d.request.path.as_str()),
            ("GET", "/api/cart")
        );

        // The client prepends a forged address; the proxies append what they saw.
        let xff = [
            ("x-app", "shop"),
            ("x-forwarded-for", "6.6.6.6, 198.51.100.7"),
            ("x-forwarded-for", "10.0.0.2"),
        ];
        let ip = |h: &[(&str, &str)], peer: Option<&str>, p: TrustedProxies| {
            CheckRequest {
                headers: h,
                method: "GET",
                path_and_query: "/v1/authz",
                peer_ip: peer,
            }
            .to_decide_trusting(&trust(ProxyFamily::Nginx, p))
            .unwrap()
            .client
            .ip
        };
        let peer = Some("10.0.0.1");
        assert_eq!(
            ip(&xff, peer, nets(&["10.0.0.0/8"])).as_deref(),
            Some("198.51.100.7")
        );
        assert_eq!(
            ip(&xff, peer, TrustedProxies::Hops(2)).as_deref(),
            Some("198.51.100.7")
        );
        assert_eq!(
            ip(&xff, peer, TrustedProxies::Hops(1)).as_deref(),
            Some("10.0.0.2")
        );
        // Nobody trusted: the peer itself; everyone trusted: the left-most.
        assert_eq!(
            ip(&xff, peer, TrustedProxies::Hops(0)).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(ip(&xff, peer, nets(&[])).as_deref(), Some("10.0.0.1"));
        assert_eq!(
            ip(&xff, peer, nets(&["0.0.0.0/0"])).as_deref(),
            Some("6.6.6.6")
        );
        // The default trusts a proxy on loopback only: a remote peer's headers are not believed.
        assert_eq!(
            ip(&xff, peer, TrustedProxies::default()).as_deref(),
            Some("10.0.0.1")
        );
        let local = [
            ("x-app", "shop"),
            ("x-forwarded-for", "6.6.6.6, 203.0.113.9"),
        ];
        assert_eq!(
            ip(&local, Some("127.0.0.1"), TrustedProxies::default()).as_deref(),
            Some("203.0.113.9")
        );
        // X-Real-IP only without X-Forwarded-For; garbage stands for nothing.
        let both = [
            ("x-app", "shop"),
            ("x-real-ip", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.9"),
        ];
        assert_eq!(
            ip(&both, Some("127.0.0.1"), TrustedProxies::default()).as_deref(),
            Some("203.0.113.9")
        );
        let junk = [("x-app", "shop"), ("x-forwarded-for", "not-an-ip")];
        assert_eq!(
            ip(&junk, Some("127.0.0.1"), TrustedProxies::Hops(1)).as_deref(),
            Some("127.0.0.1")
        );
        let ported = [
            ("x-app", "shop"),
            ("x-forwarded-for", "[2001:db8::1]:443, 192.0.2.4:80"),
        ];
        assert_eq!(
            ip(&ported, Some("::1"), TrustedProxies::Hops(1)).as_deref(),
            Some("192.0.2.4")
        );
        assert!(IpNet::parse("10.0.0.0/33").is_none() && IpNet::parse("x").is_none());
        assert!(IpNet::parse("::ffff:0:0/96").is_some());
        assert!(IpNet::parse("10.0.0.0/8")
            .unwrap()
            .contains("::ffff:10.1.2.3".parse().unwrap()));
    }

    /// The `rampart_clearance` cookie stands for `x-rampart-clearance` (which wins when both come).
    #[test]
    fn the_clearance_cookie_becomes_the_clearance_header() {
        let t = trust(ProxyFamily::Nginx, TrustedProxies::default());
        let h = [
            ("x-app", "shop"),
            ("cookie", "a=1; rampart_clearance=c1.tok; b=2"),
        ];
        let d = check(&h, "/v1/authz").to_decide_trusting(&t).unwrap();
        assert_eq!(d.request.header("x-rampart-clearance"), Some("c1.tok"));
        let h = [
            ("x-app", "shop"),
            ("cookie", "rampart_clearance=c1.cookie"),
            ("x-rampart-clearance", "c1.header"),
        ];
        let d = check(&h, "/v1/authz").to_decide_trusting(&t).unwrap();
        assert_eq!(d.request.header("x-rampart-clearance"), Some("c1.header"));
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
        // The peer is no trusted proxy (the default trusts loopback only): its forwarding headers
        // are not believed, whatever they hold.
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
