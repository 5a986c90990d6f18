//! Shared state on Redis or Redis Cluster: the stores of the decision path (nonces, fingerprints)
//! and of the rule helpers (rate limits, counters, distinct counts, quotas), so that any number of
//! engine replicas act as one.
//!
//! # How a synchronous decision talks to Redis
//!
//! The decision path and the Rhai helpers are synchronous (the core does no I/O), so each store
//! call is a blocking call from the decision's thread. It is served by one [`Redis`] per process:
//! a small Tokio runtime of its own (`redis-io` threads) drives redis-rs *multiplexed* connections
//! — a [`ConnectionManager`] for a single node (it reconnects by itself), a cluster connection for
//! Redis Cluster (it follows `MOVED`/`ASK` and refreshes the slot map by itself). A call polls its
//! request future on the calling thread (inside that runtime's context, so timers and reconnects
//! land there): the future hands the packed command to the connection's pipeline task and the
//! thread parks until the answer or the per-call timeout — no task spawned, one wake-up. Because
//! every worker's calls share the multiplexed connections, concurrent decisions are pipelined onto
//! one socket per node instead of costing one connection each; calls that belong to one decision
//! and do not depend on each other (the four reputation reads) are issued together, and writes
//! nobody waits for (reputation learning after a refusal) are not waited for.
//!
//! Multi-key scripts keep their keys in one cluster slot with a hash tag; every check-and-set is
//! one Lua script (`EVALSHA`, reloaded by redis-rs on `NOSCRIPT`), so it is atomic on its node.
//!
//! # Failures
//!
//! Every call has a bounded timeout. After three consecutive connection failures the store stops
//! trying for a short cool-down (250 ms) and fails fast, so an outage costs callers microseconds,
//! not timeouts; the first call after the cool-down probes again, and service resumes without a
//! restart as soon as Redis answers. What a failure means for a decision is the store's declared
//! policy (`[state] on_store_error` and the per-store `*_on_error` keys), applied by the core.

mod scripts;
mod stores;

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use rampart_core::nonce::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

pub use stores::{
    BloomLayout, NonceMode, RedisDistinct, RedisFingerprints, RedisLimiter, RedisNonces,
    RedisQuotas,
};

/// Where the shared state lives and how to reach it (from `[state]`).
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// One node: `redis://host:port/db`. Empty when `cluster_nodes` is set.
    pub url: String,
    /// Seed nodes of a Redis Cluster; non-empty = cluster mode.
    pub cluster_nodes: Vec<String>,
    /// Prefix of every key (`<prefix>:n:…`), so several deployments can share a Redis.
    pub prefix: String,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Multiplexed connections per node (calls are spread over them round-robin).
    pub connections: usize,
}

/// A multiplexed connection to one node or to a cluster, handed to each call (cheap to clone:
/// both are shared handles).
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Runs `requests` concurrently (on one node they leave in one pipelined write; on a cluster they
/// go to their nodes in parallel) and collects their answers in order.
pub async fn join_all<T, Fut>(requests: impl IntoIterator<Item = Fut>) -> RedisResult<Vec<T>>
where
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = requests.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "request task failed",
                e.to_string(),
            ))
        })??);
    }
    Ok(out)
}

/// Consecutive connection failures after which calls fail fast for [`COOL_DOWN_MS`].
const TRIP_AFTER: u32 = 3;
const COOL_DOWN_MS: i64 = 250;

/// Counters of the Redis client (registered as metrics by [`crate::metrics::Metrics`]).
#[derive(Debug, Default, Clone)]
pub struct RedisCounters {
    pub calls: Counter,
    pub errors: Counter,
    pub timeouts: Counter,
    /// Calls refused without trying during a cool-down.
    pub fast_failures: Counter,
}

/// Consecutive failures and the cool-down they trigger (shared with detached writes).
#[derive(Default)]
struct Health {
    failures: AtomicU32,
    open_until_ms: AtomicI64,
    counters: RedisCounters,
}

impl Health {
    fn record<T>(&self, r: &Result<T, redis::RedisError>) {
        match r {
            Ok(_) => {
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
            }
            Err(e) => {
                self.counters.errors.inc();
                if is_connection_error(e) {
                    self.trip();
                }
            }
        }
    }

    fn trip(&self) {
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= TRIP_AFTER {
            self.open_until_ms
                .store(mono_ms() + COOL_DOWN_MS, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    fn timed_out(&self) {
        self.counters.timeouts.inc();
        self.trip();
    }
}

/// The process's Redis client: its own I/O runtime, its connections, its health.
pub struct Redis {
    /// `Option` only so that `Drop` can shut it down from any context.
    io: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    conns: Arc<ArcSwapOption<Vec<RedisConn>>>,
    next: AtomicUsize,
    timeout: Duration,
    prefix: String,
    health: Arc<Health>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            // Allowed anywhere, unlike dropping a runtime (e.g. from a worker thread).
            io.shutdown_background();
        }
    }
}

/// Wakes a parked thread.
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    static WAKER: std::task::Waker =
        Arc::new(ThreadWaker(std::thread::current())).into();
}

/// Polls `fut` to completion on this thread, parking between polls.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    WAKER.with(|w| {
        let mut cx = std::task::Context::from_waker(w);
        loop {
            if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    })
}

/// Milliseconds on a monotonic clock (a wall-clock step must not stretch a cool-down).
pub(crate) fn mono_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as i64
}

fn unavailable(msg: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("redis: {msg}"))
}

/// Whether an error says the connection (not the command) failed.
fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            redis::ErrorKind::Io | redis::ErrorKind::ClusterConnectionNotFound
        )
}

impl Redis {
    /// Starts the I/O runtime and connects in the background; waits up to the connect timeout for
    /// the first connection (an unreachable Redis does not stop the start: calls fail by policy
    /// until it answers, and `/readyz` says so).
    pub fn start(s: &RedisSettings, counters: RedisCounters) -> Result<Arc<Redis>, String> {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-io")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the Redis I/O runtime: {e}"))?;
        let conns: Arc<ArcSwapOption<Vec<RedisConn>>> = Arc::new(ArcSwapOption::empty());
        let handle = io.handle().clone();
        let redis = Arc::new(Redis {
            io: Some(io),
            handle,
            conns: conns.clone(),
            next: AtomicUsize::new(0),
            timeout: s.timeout,
            prefix: s.prefix.clone(),
            health: Arc::new(Health {
                counters,
                ..Default::default()
            }),
        });
        let connect = connector(s)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let shown = if s.cluster_nodes.is_empty() {
            s.url.clone()
        } else {
            s.cluster_nodes.join(",")
        };
        let n = s.connections.max(1);
        redis.handle.spawn(async move {
            let mut delay = Duration::from_millis(100);
            loop {
                let mut made = Vec::with_capacity(n);
                let mut failed = None;
                for _ in 0..n {
                    match connect().await {
                        Ok(c) => made.push(c),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    None => {
                        conns.store(Some(Arc::new(made)));
                        tracing::info!(redis = %shown, connections = n, "connected to redis");
                        let _ = tx.try_send(());
                        return;
                    }
                    Some(e) => {
                        tracing::warn!(redis = %shown, error = %e, "cannot connect to redis yet; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
        let _ = rx.recv_timeout(s.connect_timeout);
        Ok(redis)
    }

    /// Whether the first connection has been made.
    pub fn connected(&self) -> bool {
        self.conns.load().is_some()
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether calls are currently failing fast (cool-down after connection failures).
    pub fn cooling_down(&self) -> bool {
        mono_ms() < self.health.open_until_ms.load(Ordering::Relaxed)
    }

    fn conn(&self) -> Result<RedisConn, StoreError> {
        if self.cooling_down() {
            self.health.counters.fast_failures.inc();
            return Err(unavailable("unreachable (cooling down after failed calls)"));
        }
        let guard = self.conns.load();
        let conns = guard
            .as_ref()
            .ok_or_else(|| unavailable("not connected yet"))?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        Ok(conns[i].clone())
    }

    /// Runs `f`'s request on this thread and waits for its answer, at most the call timeout.
    pub fn call<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let conn = self.conn()?;
        self.health.counters.calls.inc();
        // Timers, reconnects and spawned sub-requests belong to the Redis runtime. Unconstrained:
        // on an actix worker the poll would otherwise draw on that task's cooperative budget, and
        // once it is spent tokio defers the wake-up to actix's scheduler — which is this very
        // thread, parked below — so the call (and its timeout) would never complete.
        let _ctx = self.handle.enter();
        match block_on(tokio::task::unconstrained(tokio::time::timeout(
            self.timeout,
            f(conn),
        ))) {
            Ok(r) => {
                self.health.record(&r);
                r.map_err(unavailable)
            }
            Err(_) => {
                self.health.timed_out();
                Err(unavailable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                )))
            }
        }
    }

    /// Runs `f` on the I/O runtime without waiting (best-effort writes nobody waits for).
    pub fn send<F, Fut>(&self, f: F)
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = RedisResult<()>> + Send + 'static,
    {
        let Ok(conn) = self.conn() else { return };
        self.health.counters.calls.inc();
        let fut = f(conn);
        let health = self.health.clone();
        let timeout = self.timeout;
        self.handle.spawn(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => health.record(&r),
                Err(_) => health.timed_out(),
            }
        });
    }
}

type ConnectFuture = std::pin::Pin<Box<dyn Future<Output = RedisResult<RedisConn>> + Send>>;

/// A function that opens one multiplexed connection (single node or cluster).
fn connector(s: &RedisSettings) -> Result<impl Fn() -> ConnectFuture + Send + 'static, String> {
    enum Target {
        Single(redis::Client, ConnectionManagerConfig),
        Cluster(redis::cluster::ClusterClient),
    }
    let target = if s.cluster_nodes.is_empty() {
        let client = redis::Client::open(s.url.as_str())
            .map_err(|e| format!("state.redis_url {:?}: {e}", s.url))?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(s.connect_timeout))
            .set_response_timeout(Some(s.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        Target::Single(client, cfg)
    } else {
        let client = redis::cluster::ClusterClient::builder(s.cluster_nodes.clone())
            .connection_timeout(s.connect_timeout)
            .response_timeout(s.timeout)
            .retries(2)
            .build()
            .map_err(|e| format!("state.redis_cluster_nodes: {e}"))?;
        Target::Cluster(client)
    };
    let target = Arc::new(target);
    Ok(move || -> ConnectFuture {
        let t = target.clone();
        Box::pin(async move {
            match &*t {
                Target::Single(client, cfg) => {
                    ConnectionManager::new_with_config(client.clone(), cfg.clone())
                        .await
                        .map(RedisConn::Single)
                }
                Target::Cluster(client) => {
                    client.get_async_connection().await.map(RedisConn::Cluster)
                }
            }
        })
    })
}

/// Checks the Redis settings without connecting (for `rampart check` and start-up validation).
pub fn validate(s: &RedisSettings) -> Result<(), String> {
    connector(s).map(|_| ())
}
