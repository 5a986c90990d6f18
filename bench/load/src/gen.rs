//! The load generator: keep-alive HTTP/1.1 connections on a single-threaded tokio runtime, each
//! sending signed `/v1/decide` bodies (a fresh nonce, user and parameters per request) and
//! waiting for the answer. Closed loop (as fast as answers come) measures the maximum rate; open
//! loop (a pacer thread hands the connections evenly spaced send times) measures latency at a
//! given rate, timed from the scheduled send so a stall counts against the server (no coordinated
//! omission).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const APP: &str = "shop";
pub const SECRET: &[u8] = b"load-test-secret-0123456789";
const PATH: &str = "/api/cart/add";

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Latencies in microseconds, sorted.
    pub lat_us: Vec<u32>,
    /// Open loop: how late the generator itself woke for a scheduled send (µs, sorted).
    pub lag_us: Vec<u32>,
    /// Answers by decision code (engine) or status (baseline).
    pub codes: std::collections::BTreeMap<String, u64>,
    /// CPU time the generator (this process, every thread) used during the run, µs.
    pub generator_cpu_us: u64,
    /// Wall time from the start until every connection finished (the CPU figures' span), s.
    pub elapsed: f64,
    /// CPU time the server process used during the run, µs (when its pid is known).
    pub server_cpu_us: Option<u64>,
}

impl Measured {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds.max(1e-9)
    }

    pub fn pct(&self, p: f64) -> f64 {
        percentile(&self.lat_us, p)
    }

    /// The generator's CPU use during the run, as a fraction of one core.
    pub fn generator_load(&self) -> f64 {
        self.generator_cpu_us as f64 / 1e6 / self.elapsed.max(1e-9)
    }

    /// Whether the generator was the bottleneck (over 90% of its core): the rate then measures
    /// the generator, not the server.
    pub fn generator_saturated(&self) -> bool {
        self.generator_load() > 0.9
    }

    /// The server's CPU µs per answered request.
    pub fn server_us_per_request(&self) -> Option<f64> {
        self.server_cpu_us
            .map(|c| c as f64 / (self.requests.max(1)) as f64)
    }

    /// Percentile of the generator's own wake-up lag (open loop).
    pub fn lag_pct(&self, p: f64) -> f64 {
        percentile(&self.lag_us, p)
    }
}

/// The `p` percentile of sorted values (0 when there are none).
fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64
}

/// A `/v1/decide` body for request number `seq` of connection `conn`, signed now. Two kinds of
/// request in turn, as a shop's traffic has them: `POST /api/cart/add` with a small JSON body,
/// and `GET /api/products` with a search query string and no body (whose query the edge rules and
/// the CRS read).
pub fn decide_body(conn: u64, seq: u64, salt: u64) -> Vec<u8> {
    let n = salt.wrapping_mul(1_000_003) ^ (conn << 40) ^ seq;
    let user = format!("u-{}", n % 20_000);
    const TERMS: [&str; 8] = [
        "running shoes",
        "wireless headphones",
        "coffee grinder",
        "usb-c cable 2m",
        "winter jacket",
        "4k monitor 27",
        "yoga mat",
        "lego technic",
    ];
    const CATEGORIES: [&str; 5] = ["shoes", "audio", "kitchen", "electronics", "toys"];
    let (method, path, query, body, params) = if n.is_multiple_of(2) {
        let body = format!(
            "{{\"sku\":{},\"qty\":{},\"cart\":\"c-{n:x}\"}}",
            1000 + n % 5000,
            1 + n % 3
        );
        let params = format!("{{\"sku\":{},\"cart\":\"c-{n:x}\"}}", 1000 + n % 5000);
        ("POST", PATH, String::new(), body, params)
    } else {
        // Thousands of distinct searches: a cache of scanned values must not see only eight.
        let term = format!("{} {}", TERMS[(n / 2 % 8) as usize], n / 16 % 4096);
        let cat = CATEGORIES[(n / 16 % 5) as usize];
        let page = 1 + n / 80 % 9;
        let query = format!(
            "q={}&category={cat}&page={page}&sort=price_asc",
            term.replace(' ', "+")
        );
        let params = format!("{{\"q\":\"{term}\",\"category\":\"{cat}\",\"page\":{page}}}");
        ("GET", "/api/products", query, String::new(), params)
    };
    let nonce = format!("load{salt:08x}{conn:04x}{seq:012x}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    let h = rampart_core::replay::sign::sign(
        SECRET,
        &rampart_core::replay::sign::ToSign {
            app: APP,
            method,
            path,
            query: &query,
            body: body.as_bytes(),
            timestamp_ms: now,
            nonce: &nonce,
        },
    );
    let country = ["DE", "FR", "US", "BR", "CN"][(n % 5) as usize];
    let device = ["mobile", "desktop"][(n / 3 % 2) as usize];
    // Written directly, not through a `serde_json::Value`: the generator's CPU per request is
    // what caps the baseline it can measure. (Every value here is plain ASCII; the body's quotes
    // are the only characters that need escaping.)
    let mut out = String::with_capacity(1000);
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "{{\"app\":\"{APP}\",\"request\":{{\"method\":\"{method}\",\"path\":\"{path}\",\"query\":\"{query}\",\"body\":\"{}\",\
         \"headers\":{{\"x-timestamp\":\"{}\",\"x-nonce\":\"{}\",\"x-signature\":\"{}\",\
         \"content-type\":\"application/json\",\
         \"user-agent\":\"Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36\",\
         \"accept\":\"application/json\",\"accept-language\":\"de-DE,de;q=0.9,en;q=0.8\",\
         \"referer\":\"https://shop.example/c/{}?page={}\",\"cookie\":\"sid={:016x}; cart=c-{:x}; consent=1\"}}}},\
         \"client\":{{\"ip\":\"10.{}.{}.{}\",\"country\":\"{country}\",\"device_type\":\"{device}\",\"device_id\":\"dev-{}\"}},\
         \"user_id\":\"{user}\",\"params\":{params}}}",
        body.replace('"', "\\\""),
        h.timestamp,
        h.nonce,
        h.signature,
        n % 97,
        n % 7,
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        n,
        (n >> 16) % 256,
        (n >> 8) % 256,
        1 + n % 250,
        n % 20_000,
    );
    out.into_bytes()
}

/// How the connections send.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Each connection sends its next request when the previous answer arrived.
    Closed,
    /// All connections together send `rate` requests per second on a fixed schedule.
    Open { rate: f64 },
}

/// Runs `connections` connections against `addr` for `duration`; with `server` (its pid), also
/// measures that process's CPU time over the run.
pub fn run(
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
    pace: Pace,
    server: Option<u32>,
) -> Measured {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut salt = [0u8; 8];
    let _ = getrandom::getrandom(&mut salt);
    let salt = u64::from_le_bytes(salt);
    rt.block_on(async move {
        // Every connection is made before the clock starts: connecting is not part of any answer.
        let mut streams = Vec::with_capacity(connections);
        for _ in 0..connections {
            streams.push(TcpStream::connect(addr).await.ok());
        }
        let (gen_cpu0, server_cpu0) = (
            crate::cpu::own_cpu_us(),
            server.and_then(crate::cpu::process_cpu_us),
        );
        let start = Instant::now();
        let deadline = start + duration;
        // Open loop: one pacer thread hands each connection its scheduled send times, round
        // robin, so sends leave evenly spaced. The runtime's own timer has a granularity of a
        // millisecond: every send due within one tick would leave together, a burst the server
        // must queue (at 20,000/s, 20 requests at once), which measured the generator's pacing
        // rather than the server's latency.
        let mut schedules: Vec<Option<Schedule>> = (0..connections).map(|_| None).collect();
        if let Pace::Open { rate } = pace {
            let mut senders = Vec::with_capacity(connections);
            for slot in schedules.iter_mut() {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                senders.push(tx);
                *slot = Some(rx);
            }
            std::thread::spawn(move || pacer(senders, start, deadline, rate));
        }
        let mut tasks = Vec::new();
        for (c, (stream, schedule)) in streams.into_iter().zip(schedules).enumerate() {
            tasks.push(tokio::spawn(connection(
                addr, stream, c as u64, salt, deadline, schedule,
            )));
        }
        let mut m = Measured::default();
        for t in tasks {
            if let Ok(part) = t.await {
                m.requests += part.requests;
                m.errors += part.errors;
                m.lat_us.extend(part.lat_us);
                m.lag_us.extend(part.lag_us);
                for (k, v) in part.codes {
                    *m.codes.entry(k).or_insert(0) += v;
                }
            }
        }
        m.elapsed = start.elapsed().as_secs_f64();
        m.seconds = m.elapsed.min(duration.as_secs_f64());
        m.generator_cpu_us = crate::cpu::own_cpu_us().saturating_sub(gen_cpu0);
        m.server_cpu_us = match (server_cpu0, server.and_then(crate::cpu::process_cpu_us)) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        m.lat_us.sort_unstable();
        m.lag_us.sort_unstable();
        m
    })
}

/// The pacer's shortest sleep: each wake-up costs the machine a context switch or two, shared
/// with the server under test.
const PACER_TICK: Duration = Duration::from_micros(200);

/// Scheduled send times for one connection (open loop).
type Schedule = tokio::sync::mpsc::UnboundedReceiver<Instant>;

/// Hands out send times `rate` per second from `start` until `deadline`, to the connections in
/// turn, each when it is due (a thread of its own: its sleeps are precise to tens of µs).
fn pacer(
    senders: Vec<tokio::sync::mpsc::UnboundedSender<Instant>>,
    start: Instant,
    deadline: Instant,
    rate: f64,
) {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut k = 0u64;
    loop {
        let now = Instant::now();
        // Everything due goes out; then a sleep until the next is due, of at least PACER_TICK.
        // A connection that ended (its receiver is gone) loses its turns; the others go on.
        loop {
            let at = start + interval.mul_f64(k as f64);
            if at >= deadline || senders.iter().all(|s| s.is_closed()) {
                return;
            }
            if at > now {
                std::thread::sleep((at - now).max(PACER_TICK));
                break;
            }
            let _ = senders[(k % senders.len() as u64) as usize].send(at);
            k += 1;
        }
    }
}

async fn connection(
    addr: SocketAddr,
    stream: Option<TcpStream>,
    conn: u64,
    salt: u64,
    deadline: Instant,
    mut schedule: Option<Schedule>,
) -> Measured {
    let mut m = Measured::default();
    let Some(mut s) = stream else {
        m.errors += 1;
        return m;
    };
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut seq = 0u64;
    // When the previous answer arrived.
    let mut free_at = Instant::now();
    loop {
        let sent = match schedule.as_mut() {
            None => Instant::now(),
            Some(times) => {
                let Some(scheduled) = times.recv().await else {
                    break;
                };
                if free_at <= scheduled {
                    let lag = Instant::now().saturating_duration_since(scheduled);
                    m.lag_us.push(lag.as_micros().min(u32::MAX as u128) as u32);
                }
                // A send the server delayed (the previous answer came after the scheduled time)
                // counts from the schedule: no coordinated omission. A send the generator was
                // late for (its thread's wake-up) counts from when it went out: the generator's
                // lateness is not the server's latency.
                if free_at > scheduled {
                    scheduled
                } else {
                    Instant::now()
                }
            }
        };
        if sent >= deadline {
            break;
        }
        seq += 1;
        let body = decide_body(conn, seq, salt);
        let mut req = format!(
            "POST /v1/decide HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        if s.write_all(&req).await.is_err() {
            m.errors += 1;
            break;
        }
        match read_answer(&mut s, &mut buf).await {
            Some((status, code)) => {
                free_at = Instant::now();
                let lat = (free_at - sent).as_micros().min(u32::MAX as u128) as u32;
                m.lat_us.push(lat);
                m.requests += 1;
                if status != 200 {
                    m.errors += 1;
                }
                *m.codes.entry(code).or_insert(0) += 1;
            }
            None => {
                m.errors += 1;
                break;
            }
        }
    }
    m
}

/// Reads one HTTP/1.1 answer: (status, decision code or `HTTP <status>`).
async fn read_answer(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u16, String)> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = &buf[head_end..head_end + len];
    // The decision code, without parsing the whole answer.
    let code = std::str::from_utf8(body)
        .ok()
        .and_then(|b| b.split("\"code\":\"").nth(1))
        .and_then(|r| r.split('"').next())
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}"));
    Some((status, code))
}

#[cfg(test)]
mod tests {
    /// The hand-written body is the JSON the engine expects, with the signature over its body.
    #[test]
    fn the_decide_body_is_valid_json_and_signed() {
        let b = super::decide_body(3, 7, 11);
        let v: serde_json::Value = serde_json::from_slice(&b).expect("JSON");
        assert_eq!(v["app"], super::APP);
        let body = v["request"]["body"].as_str().unwrap();
        assert!(
            serde_json::from_str::<serde_json::Value>(body).is_ok(),
            "{body}"
        );
        assert!(v["request"]["headers"]["x-signature"]
            .as_str()
            .unwrap()
            .starts_with("v1="));
        assert!(v["params"].is_object());
        let get = super::decide_body(3, 8, 11);
        let v: serde_json::Value = serde_json::from_slice(&get).expect("JSON");
        let first: serde_json::Value = serde_json::from_slice(&b).unwrap();
        let kinds = [
            v["request"]["method"].as_str(),
            first["request"]["method"].as_str(),
        ];
        assert!(
            kinds.contains(&Some("GET")) && kinds.contains(&Some("POST")),
            "{kinds:?}"
        );
    }
}
