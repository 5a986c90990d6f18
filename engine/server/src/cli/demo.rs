//! `rampart demo`: realistic mixed traffic against a running engine, so the console's charts,
//! the decision explorer and the metrics come alive with one command.
//!
//! Every request is signed like a real client's. The mix (weights per 100 requests):
//!
//! | scenario | weight | what it does | what the default rules answer |
//! |---|---|---|---|
//! | shoppers | 53 | browse, cart, order, pay, from 5,000 users on phones and desktops in six countries | mostly allow; big payments review |
//! | flash-sale rush | 15 | many users buy the same SKU at once | admission and one-per-user limits |
//! | floods | 2 | three IPs hammer the catalogue in back-to-back bursts of 25 | `RATE_LIMITED`, then challenged by reputation |
//! | coupon abuse | 8 | accounts re-claim a coupon, many accounts from one device | `QUOTA_EXHAUSTED`, device limits |
//! | lottery rush | 7 | a draw with 100 prizes | claims until the prizes are gone |
//! | WAF probes | 7 | SQL injection, XSS, path traversal from scanners | edge `RULE_DENY` |
//! | replay bursts | 5 | one captured request resent several times | `REPLAY_DUPLICATE` |
//! | bad clients | 3 | stale clocks, broken signatures | `TIMESTAMP_SKEW`, `SIGNATURE_INVALID` |

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rampart_core::replay::sign::{sign, ToSign};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The engine's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value = "demo")]
    app: String,
    /// Default: the embedded defaults' demo secret.
    #[command(flatten)]
    secret: crate::cli::SecretArgs,
    /// Requests per second, all scenarios together.
    #[arg(long, default_value_t = 200)]
    rps: u32,
    /// How long to run, in seconds (0 = until interrupted).
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Parallel connections.
    #[arg(long, default_value_t = 4)]
    connections: u32,
    /// Print a JSON summary at the end instead of text.
    #[arg(long)]
    json: bool,
}

/// A small deterministic generator (xorshift64*), seeded per worker.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn nonce(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

const COUNTRIES: [(&str, &str); 6] = [
    ("CN", "China Telecom"),
    ("US", "Comcast"),
    ("DE", "Deutsche Telekom"),
    ("BR", "Vivo"),
    ("IN", "Jio"),
    ("JP", "NTT"),
];
const PHONE_UA: &str =
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36";
const DESKTOP_UA: &str =
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36";
/// JA3 hashes of a few browser builds (the shoppers').
const BROWSER_JA3: [&str; 6] = [
    "cd08e31494f9531f560d64c695473da9",
    "b32309a26951912be7dba376398abc3b",
    "773906b0efdefa24a7f2b8eb6985bf37",
    "aa7744226c695c0b2e440419848cf700",
    "3b5074b1b5d032e5620f69f9f700ff0e",
    "579ccef312d18482fc42e2b822ca2430",
];

/// The requests to send, in order (a replay burst repeats one body).
struct Planned {
    bodies: Vec<Value>,
    /// Sent back to back (floods), not at the paced rate.
    burst: bool,
}

struct Signer {
    app: String,
    secret: Vec<u8>,
}

impl Signer {
    /// A signed decide request. `skew_ms` shifts the client clock; `tamper` breaks the signature.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        nonce: String,
        method: &str,
        path: &str,
        query: &str,
        params: Value,
        user: Option<String>,
        client: Value,
        skew_ms: i64,
        tamper: bool,
    ) -> Value {
        let body = params.to_string();
        let h = sign(
            &self.secret,
            &ToSign {
                app: &self.app,
                method,
                path,
                query,
                body: body.as_bytes(),
                timestamp_ms: crate::clock::now_ms() + skew_ms,
                nonce: &nonce,
            },
        );
        let mut sig = h.signature;
        if tamper {
            sig.replace_range(sig.len() - 4.., "0000");
        }
        let ua = client["user_agent"].as_str().unwrap_or("").to_string();
        json!({
            "app": self.app,
            "request": {
                "method": method, "path": path, "query": query,
                "headers": {
                    "x-timestamp": h.timestamp, "x-nonce": h.nonce, "x-signature": sig,
                    "user-agent": ua, "content-type": "application/json",
                },
                "body": body,
            },
            "client": client,
            "user_id": user,
            "params": params,
        })
    }
}

fn client(rng: &mut Rng, ip: Option<String>, device: Option<String>) -> Value {
    let (country, isp) = *rng.pick(&COUNTRIES);
    let phone = rng.below(3) > 0;
    // Each bot group has its own TLS stack (a JA3 of its own); shoppers use common browsers.
    let ja3 = match &device {
        Some(d) => format!("{:032x}", xxhash_rust::xxh3::xxh3_128(d.as_bytes())),
        None => rng.pick(&BROWSER_JA3).to_string(),
    };
    json!({
        "ip": ip.unwrap_or_else(|| format!("{}.{}.{}.{}", 11 + rng.below(180), rng.below(256), rng.below(256), 1 + rng.below(254))),
        "device_id": device.unwrap_or_else(|| format!("dev-{}", rng.below(8000))),
        "ja3": ja3,
        "country": country,
        "isp": isp,
        "device_type": if phone { "mobile" } else { "desktop" },
        "user_agent": if phone { PHONE_UA } else { DESKTOP_UA },
    })
}

/// The next request of the mix.
fn plan(s: &Signer, rng: &mut Rng, sale_round: u64) -> Planned {
    let roll = rng.below(100);
    let one = |body| Planned {
        bodies: vec![body],
        burst: false,
    };
    let user = |rng: &mut Rng| Some(format!("u{}", rng.below(5000)));
    match roll {
        // Shoppers.
        0..=52 => {
            let u = user(rng);
            let c = client(rng, None, None);
            let sku = format!("sku-{}", rng.below(400));
            one(match rng.below(4) {
                0 => s.decide(
                    rng.nonce(),
                    "GET",
                    "/api/products",
                    &format!("sku={sku}&lang=en"),
                    json!({}),
                    u,
                    c,
                    0,
                    false,
                ),
                1 => s.decide(
                    rng.nonce(),
                    "POST",
                    "/api/cart",
                    "",
                    json!({"sku": sku, "qty": 1 + rng.below(3)}),
                    u,
                    c,
                    0,
                    false,
                ),
                2 => s.decide(
                    rng.nonce(),
                    "POST",
                    "/api/orders",
                    "",
                    json!({"sku": sku, "qty": 1, "order": rng.nonce()}),
                    u,
                    c,
                    0,
                    false,
                ),
                _ => {
                    let amount = if rng.below(20) == 0 {
                        9000 + rng.below(5000)
                    } else {
                        5 + rng.below(400)
                    };
                    s.decide(
                        rng.nonce(),
                        "POST",
                        "/api/payments",
                        "",
                        json!({"amount": amount, "currency": "USD", "order": rng.nonce()}),
                        u,
                        c,
                        0,
                        false,
                    )
                }
            })
        }
        // Flash-sale rush: everyone on one SKU; some try to buy twice.
        53..=67 => {
            let u = Some(format!("u{}", rng.below(1500)));
            let c = client(rng, None, None);
            one(s.decide(
                rng.nonce(),
                "POST",
                "/api/flash-sale/sku-42",
                "",
                json!({"sku": "sku-42", "round": sale_round, "n": rng.nonce()}),
                u,
                c,
                0,
                false,
            ))
        }
        // Floods from three IPs: bursts of distinct requests.
        68..=69 => {
            let ip = format!("203.0.113.{}", 10 + rng.below(3));
            let c = client(rng, Some(ip), Some("flood-bot".into()));
            let bodies = (0..25)
                .map(|_| {
                    let q = format!("page={}", rng.below(50));
                    s.decide(
                        rng.nonce(),
                        "GET",
                        "/api/products",
                        &q,
                        json!({}),
                        None,
                        c.clone(),
                        0,
                        false,
                    )
                })
                .collect();
            Planned {
                bodies,
                burst: true,
            }
        }
        // Coupon abuse: re-claims, and a farm of accounts behind one device and IP.
        70..=77 => {
            let farm = rng.below(2) == 0;
            let (u, c) = if farm {
                (
                    Some(format!("farm-{}", rng.below(400))),
                    client(
                        rng,
                        Some("198.51.100.77".into()),
                        Some("farm-device".into()),
                    ),
                )
            } else {
                (
                    Some(format!("u{}", rng.below(300))),
                    client(rng, None, None),
                )
            };
            one(s.decide(
                rng.nonce(),
                "POST",
                "/api/coupons/claim",
                "",
                json!({"coupon": "SPRING", "n": rng.nonce()}),
                u,
                c,
                0,
                false,
            ))
        }
        // Lottery rush: 100 prizes per event.
        78..=84 => {
            let u = user(rng);
            let c = client(rng, None, None);
            one(s.decide(
                rng.nonce(),
                "POST",
                "/api/lottery/draw",
                "",
                json!({"event_id": format!("draw-{sale_round}"), "n": rng.nonce()}),
                u,
                c,
                0,
                false,
            ))
        }
        // WAF probes from a scanner.
        85..=91 => {
            let probes = [
                ("q", "1' OR '1'='1' --"),
                ("q", "<script>alert(document.cookie)</script>"),
                ("file", "../../../../etc/passwd"),
                ("id", "1 UNION SELECT username, password FROM users"),
                ("cmd", "; cat /etc/shadow"),
            ];
            let (k, v) = *rng.pick(&probes);
            let ip = format!("192.0.2.{}", 1 + rng.below(20));
            let mut c = client(rng, Some(ip), Some("scanner".into()));
            c["user_agent"] = json!(if rng.below(2) == 0 {
                "sqlmap/1.7.2#stable (https://sqlmap.org)"
            } else {
                DESKTOP_UA
            });
            c["isp"] = json!("DigitalOcean");
            one(s.decide(
                rng.nonce(),
                "GET",
                "/api/search",
                "",
                json!({ k: v }),
                None,
                c,
                0,
                false,
            ))
        }
        // Replay bursts: one captured request, resent.
        92..=96 => {
            let u = user(rng);
            let c = client(rng, None, None);
            let body = s.decide(
                rng.nonce(),
                "POST",
                "/api/orders",
                "",
                json!({"sku": "sku-7", "qty": 1, "order": rng.nonce()}),
                u,
                c,
                0,
                false,
            );
            Planned {
                bodies: vec![body; 3 + rng.below(8) as usize],
                burst: false,
            }
        }
        // Bad clients: clocks ten minutes off, or a broken signature.
        _ => {
            let u = user(rng);
            let c = client(rng, None, None);
            let stale = rng.below(2) == 0;
            one(s.decide(
                rng.nonce(),
                "POST",
                "/api/cart",
                "",
                json!({"sku": "sku-1"}),
                u,
                c,
                if stale { -600_000 } else { 0 },
                !stale,
            ))
        }
    }
}

#[derive(Default)]
struct Tally {
    by_code: BTreeMap<String, u64>,
    by_action: BTreeMap<String, u64>,
    errors: u64,
}

pub fn run(a: DemoArgs) -> ExitCode {
    let secret = match secret(&a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rampart demo: {e}");
            return ExitCode::from(2);
        }
    };
    let decide_url = match decide_url(&a.url) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("rampart demo: {e}");
            return ExitCode::from(2);
        }
    };
    if a.rps == 0 || a.connections == 0 {
        eprintln!("rampart demo: --rps and --connections must be at least 1");
        return ExitCode::from(2);
    }
    let signer = Arc::new(Signer {
        app: a.app.clone(),
        secret,
    });
    let tally = Arc::new(Mutex::new(Tally::default()));
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let per_conn = Duration::from_secs_f64(a.connections as f64 / a.rps as f64);
    let workers: Vec<_> = (0..a.connections)
        .map(|w| {
            let (signer, tally, sent, stop, url) = (
                signer.clone(),
                tally.clone(),
                sent.clone(),
                stop.clone(),
                decide_url.clone(),
            );
            std::thread::spawn(move || {
                let mut seed = [0u8; 8];
                let _ = getrandom::getrandom(&mut seed);
                let mut rng = Rng(u64::from_le_bytes(seed) | 1 | ((w as u64) << 1));
                let agent = agent();
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    // A new sale and a new lottery every minute.
                    let round = started.elapsed().as_secs() / 60;
                    let p = plan(&signer, &mut rng, round);
                    for body in p.bodies.iter().map(Value::to_string) {
                        let r = post(&agent, &url, body.as_bytes());
                        sent.fetch_add(1, Ordering::Relaxed);
                        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                        match r.ok().and_then(|(st, b)| {
                            (st == 200)
                                .then(|| serde_json::from_slice::<Value>(&b).ok())
                                .flatten()
                        }) {
                            Some(d) => {
                                let code = d["code"].as_str().unwrap_or("?").to_string();
                                let action = d["action"].as_str().unwrap_or("?").to_string();
                                *t.by_code.entry(code).or_default() += 1;
                                *t.by_action.entry(action).or_default() += 1;
                            }
                            None => t.errors += 1,
                        }
                        drop(t);
                        if p.burst {
                            continue;
                        }
                        next += per_conn;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else if now - next > Duration::from_secs(1) {
                            next = now; // the engine is slower than asked: do not burst to catch up
                        }
                    }
                }
            })
        })
        .collect();
    let deadline = (a.duration > 0).then(|| started + Duration::from_secs(a.duration));
    let mut last = Instant::now();
    while deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(200));
        if last.elapsed() >= Duration::from_secs(5) && !a.json {
            last = Instant::now();
            let t = tally.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!(
                "{:>5.0} s  {} requests  {}  errors {}",
                started.elapsed().as_secs_f64(),
                sent.load(Ordering::Relaxed),
                t.by_action
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                t.errors
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let t = tally.lock().unwrap_or_else(|e| e.into_inner());
    let secs = started.elapsed().as_secs_f64();
    let total = sent.load(Ordering::Relaxed);
    if a.json {
        println!(
            "{}",
            json!({
                "requests": total,
                "seconds": secs,
                "by_action": t.by_action,
                "by_code": t.by_code,
                "errors": t.errors,
            })
        );
    } else {
        println!(
            "sent {total} requests in {secs:.1} s ({:.0}/s), {} failed to get an answer",
            total as f64 / secs,
            t.errors
        );
        for (code, n) in &t.by_code {
            println!("  {code:<22} {n}");
        }
    }
    if t.errors > 0 && t.errors == total {
        eprintln!(
            "rampart demo: no answer from {}: is the engine running?",
            a.url
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `POST /v1/decide` of the engine at `url`, `http://host[:port]` (the demo speaks plain HTTP to
/// an engine it can reach directly).
fn decide_url(url: &str) -> Result<String, String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|_| format!("{url:?}: only http:// URLs are supported"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url:?}: only http:// URLs are supported"));
    }
    match uri.authority() {
        Some(a) if !a.host().is_empty() => Ok(format!("http://{a}/v1/decide")),
        _ => Err(format!("{url:?}: no host")),
    }
}

/// One worker's client: keep-alive connections, no proxy (the engine is reached directly), every
/// status an answer rather than an error, 10 s at most per request.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Sends one decision; returns the status and the body. A request that fails is sent once more
/// (the engine may have closed the idle connection it went out on).
fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<(u16, Vec<u8>), ureq::Error> {
    let once = || -> Result<(u16, Vec<u8>), ureq::Error> {
        let mut r = agent
            .post(url)
            .header("content-type", "application/json")
            .send(body)?;
        let status = r.status().as_u16();
        Ok((status, r.body_mut().read_to_vec()?))
    };
    once().or_else(|_| once())
}

fn secret(a: &DemoArgs) -> Result<Vec<u8>, String> {
    Ok(a.secret
        .resolve(&a.app, None)?
        .unwrap_or_else(|| crate::config::DEMO_SECRET.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::decide_url;

    #[test]
    fn the_engine_url_is_plain_http_with_a_host() {
        assert_eq!(
            decide_url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/v1/decide"
        );
        // As before: only the host and port of the URL count.
        assert_eq!(
            decide_url("http://localhost/some/path").unwrap(),
            "http://localhost/v1/decide"
        );
        for bad in ["ftp://x", "https://x:8443", "x", "127.0.0.1:8080"] {
            let e = decide_url(bad).unwrap_err();
            assert!(e.contains("only http:// URLs are supported"), "{bad}: {e}");
        }
        assert!(decide_url("http://").unwrap_err().contains("http://"));
    }
}
