//! Reputation held in every instance, kept current by Redis pub/sub: the edge tier's
//! `reputation(req)` is read on every request, and reading it from Redis was one blocking round
//! trip per decision for a value that is almost always 0.
//!
//! Reputation only changes when a tier refuses a client (a write nobody waits for) or an operator
//! resets it. On one Redis node, every such write publishes the counter's new state on the channel
//! `<prefix>:reputation` from inside its script (`WINDOW` with a channel; a reset publishes the
//! deletion), so each subscribed instance sees every change, in Redis's order, a moment after it
//! happened. Each instance:
//!
//! 1. subscribes (a blocking connection on a thread of its own, `redis-mirror`);
//! 2. reads every reputation counter that exists (`SCAN MATCH <prefix>:w:rep…` and `HMGET`);
//! 3. applies the messages that arrived meanwhile, in order, then publishes a marker of its own
//!    and is *ready* when the marker comes back: every change made before the marker is applied.
//!    A message carries the counter's whole state, so applying one that is older than what the
//!    scan read only lasts until the newer message that must follow it.
//!
//! While ready, reputation reads are answered from the copy, with the same arithmetic as a read
//! from Redis ([`window_estimate`]); otherwise (starting, reconnecting, a cluster, more than
//! [`MAX_SUBJECTS`] clients with points, a key hashed for length) they go to Redis as before.
//! How stale a ready copy can be: the pub/sub delivery delay (well under a millisecond on a LAN),
//! on top of the learning write that was already not awaited.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use rampart_core::store::limits::{window_estimate, StoredWindow};

use super::stores::{stored_window, REPUTATION_PREFIX};
use super::Redis;

/// Most clients with reputation points the copy holds; above it, reads go to Redis until a
/// resynchronisation finds fewer.
pub const MAX_SUBJECTS: usize = 200_000;

/// How long the thread waits before trying again after losing Redis or finding too many clients.
const RETRY_AFTER: Duration = Duration::from_secs(1);
const RETRY_AFTER_OVERFLOW: Duration = Duration::from_secs(30);

pub struct Mirror {
    /// Store key (`rep\x1f<kind>\x1f<value>`) → its window.
    windows: RwLock<HashMap<String, StoredWindow>>,
    ready: AtomicBool,
    channel: String,
    /// `<prefix>:w:`, cut from the Redis keys the messages name.
    key_prefix: String,
}

impl Mirror {
    pub fn new(prefix: &str) -> Arc<Mirror> {
        Arc::new(Mirror {
            windows: RwLock::new(HashMap::new()),
            ready: AtomicBool::new(false),
            channel: channel(prefix),
            key_prefix: format!("{prefix}:w:"),
        })
    }

    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The estimates of `keys` (store keys), or `None` when the copy cannot answer for all of them.
    pub fn read(&self, keys: &[String], now_ms: i64, window_ms: i64) -> Option<Vec<i64>> {
        if !self.ready() || !keys.iter().all(|k| mirrored(k)) {
            return None;
        }
        let windows = self.windows.read().ok()?;
        Some(
            keys.iter()
                .map(|k| window_estimate(windows.get(k.as_str()).copied(), now_ms, window_ms))
                .collect(),
        )
    }

    /// Applies one message: `<redis key>\n<s> <w> <c> <p>`, or `<redis key>\n` for a deletion.
    /// False when the copy would grow past [`MAX_SUBJECTS`].
    fn apply(&self, payload: &[u8]) -> bool {
        let Some(nl) = payload.iter().rposition(|&b| b == b'\n') else {
            return true;
        };
        let (Ok(key), Ok(fields)) = (
            std::str::from_utf8(&payload[..nl]),
            std::str::from_utf8(&payload[nl + 1..]),
        ) else {
            return true;
        };
        let Some(key) = key.strip_prefix(&self.key_prefix) else {
            return true;
        };
        let Ok(mut windows) = self.windows.write() else {
            return true;
        };
        let fields: Vec<Option<String>> = fields.split(' ').map(|f| Some(f.to_string())).collect();
        match stored_window(&fields) {
            None => {
                windows.remove(key);
            }
            Some(w) => {
                if windows.len() >= MAX_SUBJECTS && !windows.contains_key(key) {
                    return false;
                }
                windows.insert(key.to_string(), w);
            }
        }
        true
    }

    /// Drops the windows that have ended (both halves of a sliding window past).
    fn purge(&self, now_ms: i64) {
        if let Ok(mut windows) = self.windows.write() {
            windows.retain(|_, w| now_ms < w.start + 2 * w.window);
        }
    }

    pub fn len(&self) -> usize {
        self.windows.read().map_or(0, |w| w.len())
    }

    /// Starts the thread that follows the channel (one Redis node only; on a cluster the copy
    /// stays unready and reads go to Redis). It ends when `redis` is dropped.
    pub fn start(self: &Arc<Self>, redis: &Arc<Redis>) {
        let Some(client) = redis.single_client() else {
            return;
        };
        let mirror = self.clone();
        let alive = redis.alive_handle();
        let connect_timeout = redis.connect_timeout();
        let timeout = redis.timeout();
        let _ = std::thread::Builder::new()
            .name("redis-mirror".into())
            .spawn(move || {
                while alive.upgrade().is_some() {
                    let pause = match mirror.follow(&client, &alive, connect_timeout, timeout) {
                        Ok(()) => return,
                        Err(Stop::Overflow) => {
                            tracing::warn!(
                                max = MAX_SUBJECTS,
                                "more clients have reputation points than the local copy holds; \
                                 reputation is read from redis"
                            );
                            RETRY_AFTER_OVERFLOW
                        }
                        Err(Stop::Redis(e)) => {
                            tracing::debug!(error = %e, "reputation copy: redis lost; reading from redis meanwhile");
                            RETRY_AFTER
                        }
                    };
                    mirror.ready.store(false, Ordering::Release);
                    if let Ok(mut w) = mirror.windows.write() {
                        *w = HashMap::new();
                    }
                    std::thread::sleep(pause);
                }
            });
    }

    /// Subscribes, reads what exists, and applies changes until Redis is dropped (`Ok`) or lost.
    fn follow(
        &self,
        client: &redis::Client,
        alive: &Weak<()>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<(), Stop> {
        let mut sub = client.get_connection_with_timeout(connect_timeout)?;
        sub.set_write_timeout(Some(timeout))?;
        let mut ps = sub.as_pubsub();
        ps.subscribe(&self.channel)?;
        // Polls, so that the thread notices when its Redis is dropped.
        ps.set_read_timeout(Some(Duration::from_millis(500)))?;

        let mut conn = client.get_connection_with_timeout(connect_timeout)?;
        conn.set_read_timeout(Some(timeout.max(Duration::from_secs(1))))?;
        conn.set_write_timeout(Some(timeout))?;
        let pattern = format!("{}{}*", glob_escape(&self.key_prefix), REPUTATION_PREFIX);
        let mut fresh = HashMap::new();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut conn)?;
            if !keys.is_empty() {
                let mut p = redis::pipe();
                for k in &keys {
                    p.cmd("HMGET").arg(k).arg("s").arg("w").arg("c").arg("p");
                }
                let answers: Vec<Vec<Option<String>>> = p.query(&mut conn)?;
                for (k, a) in keys.into_iter().zip(answers) {
                    if let (Some(w), Some(k)) =
                        (stored_window(&a), k.strip_prefix(&self.key_prefix))
                    {
                        fresh.insert(k.to_string(), w);
                    }
                }
                if fresh.len() > MAX_SUBJECTS {
                    return Err(Stop::Overflow);
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        *self
            .windows
            .write()
            .map_err(|_| Stop::Redis("poisoned".into()))? = fresh;
        let marker = format!("\n{:016x}", rand_token());
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(&marker)
            .query(&mut conn)?;
        drop(conn);

        let mut purged = Instant::now();
        loop {
            match ps.get_message() {
                Ok(msg) => {
                    let payload = msg.get_payload_bytes();
                    if payload == marker.as_bytes() {
                        self.ready.store(true, Ordering::Release);
                        tracing::debug!(subjects = self.len(), "reputation copy ready");
                    } else if !self.apply(payload) {
                        return Err(Stop::Overflow);
                    }
                }
                Err(e) if e.is_timeout() => {
                    if alive.upgrade().is_none() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e.into()),
            }
            if purged.elapsed() >= Duration::from_secs(10) {
                purged = Instant::now();
                self.purge(wall_ms());
            }
        }
    }
}

enum Stop {
    Overflow,
    Redis(String),
}

impl From<redis::RedisError> for Stop {
    fn from(e: redis::RedisError) -> Self {
        Stop::Redis(e.to_string())
    }
}

/// The channel reputation writes publish on.
pub fn channel(prefix: &str) -> String {
    format!("{prefix}:reputation")
}

/// Whether a store key can be answered from the copy: a reputation key kept whole (longer keys
/// are replaced by a hash in Redis, which the scan cannot tell from others).
pub fn mirrored(key: &str) -> bool {
    key.starts_with(REPUTATION_PREFIX) && key.len() <= super::stores::MAX_KEY
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn rand_token() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::getrandom(&mut b).is_err() {
        return wall_ms() as u64 ^ u64::from(std::process::id()) << 32;
    }
    u64::from_le_bytes(b)
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_set_and_delete_windows() {
        let m = Mirror::new("rp");
        m.ready.store(true, Ordering::Release);
        let key = format!("{REPUTATION_PREFIX}ip\u{1f}198.51.100.9");
        assert!(m.apply(format!("rp:w:{key}\n60000 60000 40 0").as_bytes()));
        assert_eq!(
            m.read(std::slice::from_ref(&key), 60_500, 60_000),
            Some(vec![40])
        );
        // Numbers printed by Lua as floats are read too.
        assert!(m.apply(format!("rp:w:{key}\n6e4 6.0e4 45 0").as_bytes()));
        assert_eq!(
            m.read(std::slice::from_ref(&key), 60_500, 60_000),
            Some(vec![45])
        );
        assert!(m.apply(format!("rp:w:{key}\n").as_bytes()));
        assert_eq!(
            m.read(std::slice::from_ref(&key), 60_500, 60_000),
            Some(vec![0])
        );
        // Other prefixes, keys and garbage change nothing.
        assert!(m.apply(b"other:w:x\n1 1 1 1"));
        assert!(m.apply(b"no newline"));
        assert_eq!(m.len(), 0);
        // A key hashed for length is not answered from the copy.
        let long = format!("{REPUTATION_PREFIX}user\u{1f}{}", "u".repeat(300));
        assert_eq!(m.read(&[long], 60_500, 60_000), None);
        // Nor anything while not ready.
        m.ready.store(false, Ordering::Release);
        assert_eq!(m.read(&[key], 60_500, 60_000), None);
    }

    #[test]
    fn ended_windows_are_purged() {
        let m = Mirror::new("rp");
        let key = format!("{REPUTATION_PREFIX}ip\u{1f}a");
        m.apply(format!("rp:w:{key}\n1000 1000 5 0").as_bytes());
        m.purge(2_999);
        assert_eq!(m.len(), 1);
        m.purge(3_000);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn glob_characters_in_the_prefix_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
