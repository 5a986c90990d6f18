//! Shared state on Redis or Redis Cluster: the stores of the decision path (nonces, fingerprints)
//! and of the rule helpers (rate limits, counters, distinct counts, quotas), so that any number of
//! engine replicas act as one.
//!
//! # How a synchronous decision talks to Redis
//!
//! The decision path and the Rhai helpers are synchronous (the core does no I/O), so each store
//! call is a blocking call from the decision's thread. Each thread that calls keeps its own
//! blocking connection ([`redis::Connection`] for a single node, a [`redis::cluster`] connection
//! for Redis Cluster, which follows `MOVED`/`ASK` and refreshes the slot map by itself): the
//! thread writes the command and reads the answer itself, with the call timeout as the socket's
//! read and write timeout. No other thread is involved, so a call costs one write, one read and the
//! wait for Redis — not the two cross-thread wake-ups of handing the command to an I/O thread and
//! being woken by it (measured: that hand-off was most of the engine's CPU per decision with
//! Redis state; see the README's performance section). Calls that belong to one decision and do
//! not depend on each other (the four reputation reads, a pool's segment counters) leave in one
//! pipelined write.
//!
//! Writes nobody waits for (reputation learning after a refusal) go through a small Tokio runtime
//! of their own (`redis-io`) and its multiplexed connections, so the decision does not wait for
//! them.
//!
//! Multi-key scripts keep their keys in one cluster slot with a hash tag; every check-and-set is
//! one Lua script (`EVALSHA`, loaded again by redis-rs on `NOSCRIPT`), so it is atomic on its node.
//! Reads that change nothing are plain commands, computed here.
//!
//! # Failures
//!
//! Every call has a bounded timeout. A connection that failed or timed out is dropped (the
//! thread's next call connects again). After three consecutive connection failures, when no call
//! at all succeeded for 250 ms, the store stops trying for a short cool-down (250 ms) and fails
//! fast, so an outage costs callers microseconds, not timeouts; the first call after the cool-down
//! probes again, and service resumes without a restart as soon as Redis answers. A partial outage
//! (one cluster master down, the others answering) does not start a cool-down: only the calls that
//! meet the dead node fail. What a failure means for a decision is the store's declared
//! policy (`[state] on_store_error` and the per-store `*_on_error` keys), applied by the core.

mod combine;
mod mirror;
mod scripts;
mod stores;

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use rampart_core::store::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Script, Value};

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
    /// Replicas that must acknowledge each anti-replay write (`WAIT`) before it counts; 0 = none
    /// (Redis's asynchronous replication: a failover may forget the last accepted nonces).
    pub replica_acks: u32,
    /// How long an anti-replay write waits for those acknowledgements.
    pub replica_ack_timeout: Duration,
    /// Concurrent decisions' anti-replay scripts share writes (one node, no `replica_acks`):
    /// see `combine.rs`.
    pub coalesce: bool,
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

/// A blocking connection of one thread: to one node, or to a cluster.
pub enum SyncConn {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl redis::ConnectionLike for SyncConn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            SyncConn::Single(c) => c.req_packed_command(cmd),
            SyncConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            SyncConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            SyncConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            SyncConn::Single(c) => c.get_db(),
            SyncConn::Cluster(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            SyncConn::Single(c) => c.check_connection(),
            SyncConn::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            SyncConn::Single(c) => c.is_open(),
            SyncConn::Cluster(c) => c.is_open(),
        }
    }
}

impl SyncConn {
    /// Sends independent commands in one write and reads their answers in order. On a cluster
    /// each command goes to the node of its key (a plain pipeline would go to one node only).
    pub fn query_all<T: redis::FromRedisValue>(&mut self, cmds: Vec<Cmd>) -> RedisResult<Vec<T>> {
        match self {
            SyncConn::Single(c) => {
                let mut p = redis::pipe();
                for cmd in cmds {
                    p.add_command(cmd);
                }
                p.query(c)
            }
            SyncConn::Cluster(c) => {
                let mut p = redis::cluster::cluster_pipe();
                for cmd in cmds {
                    p.add_command(cmd);
                }
                p.query(c)
            }
        }
    }
}

/// How a thread opens its blocking connection.
enum SyncTarget {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl SyncTarget {
    fn connect(&self, connect_timeout: Duration, timeout: Duration) -> RedisResult<SyncConn> {
        match self {
            SyncTarget::Single(client) => {
                let c = client.get_connection_with_timeout(connect_timeout)?;
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))?;
                Ok(SyncConn::Single(c))
            }
            SyncTarget::Cluster(client) => client
                .get_connection()
                .map(|c| SyncConn::Cluster(Box::new(c))),
        }
    }
}

/// Identifies a [`Redis`] in the threads' connection lists (a process may hold several: tests,
/// or a configuration reloaded with another Redis).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A thread's connection to one [`Redis`]: the client's id, whether it is alive, the connection,
/// when it was last used, when it was made.
type ThreadConn = (u64, Weak<()>, SyncConn, Instant, Instant);

thread_local! {
    /// This thread's blocking connections, one per live [`Redis`] it has called (usually one),
    /// with when each was last used. An entry whose `Redis` is gone is dropped the next time the
    /// list changes.
    static CONNS: RefCell<Vec<ThreadConn>> = const { RefCell::new(Vec::new()) };
}

/// A connection idle for longer is checked with a `PING` before use: Redis (`timeout`) or a proxy
/// may have closed it meanwhile, and a decision must not fail for a connection that merely aged.
/// Under load every connection is in use and pays nothing.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// A cluster connection one of whose nodes refuses connections is kept (its other nodes are fine)
/// for this long after it was made; then the next refusal drops it, and the new one reads the
/// slot map again (finding, in time, the replica promoted in the dead master's place).
const KEEP_WITH_A_DEAD_NODE: Duration = Duration::from_millis(200);

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
    /// Idempotent calls sent again after getting no answer.
    pub resent: Counter,
    /// Rate-limit checks answered by a remembered refusal instead of a call.
    pub refusals_cached: Counter,
    /// Reputation reads answered from the instance's copy instead of a call.
    pub reputation_reads_copied: Counter,
    /// Anti-replay writes that fewer than `replica_acks` replicas acknowledged in time.
    pub ack_shortfalls: Counter,
    /// Writes of coalesced commands (see `combine.rs`), and the commands they carried.
    pub coalesced_writes: Counter,
    pub coalesced_commands: Counter,
}

/// Consecutive failures and the cool-down they trigger (shared with detached writes).
///
/// The cool-down starts only when Redis answered nothing at all for [`COOL_DOWN_MS`]: in a
/// cluster with one master down, two thirds of the calls still succeed, and a cool-down would
/// refuse those too (it cannot tell one node's calls from another's). Calls to the dead master's
/// slots then fail one by one (a refused connection, or the connect timeout) and the rest flow.
struct Health {
    failures: AtomicU32,
    open_until_ms: AtomicI64,
    /// When a call last succeeded ([`mono_ms`]).
    last_ok_ms: AtomicI64,
    counters: RedisCounters,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            failures: AtomicU32::new(0),
            open_until_ms: AtomicI64::new(0),
            // As if the last success was long ago: a Redis unreachable from the start trips at
            // once.
            last_ok_ms: AtomicI64::new(i64::MIN / 2),
            counters: RedisCounters::default(),
        }
    }
}

impl Health {
    fn record<T>(&self, r: &Result<T, redis::RedisError>) {
        match r {
            Ok(_) => self.succeeded(mono_ms()),
            Err(e) => {
                self.counters.errors.inc();
                if is_connection_error(e) {
                    self.trip(mono_ms());
                }
            }
        }
    }

    fn succeeded(&self, now: i64) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        // One store per millisecond at most: a shared cache line every call would write is the
        // cost of a busy process.
        if self.last_ok_ms.load(Ordering::Relaxed) != now {
            self.last_ok_ms.store(now, Ordering::Relaxed);
        }
    }

    fn trip(&self, now: i64) {
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= TRIP_AFTER
            && now - self.last_ok_ms.load(Ordering::Relaxed) >= COOL_DOWN_MS
        {
            self.open_until_ms
                .store(now + COOL_DOWN_MS, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    fn open(&self, now: i64) -> bool {
        now < self.open_until_ms.load(Ordering::Relaxed)
    }

    fn timed_out(&self) {
        self.counters.timeouts.inc();
        self.trip(mono_ms());
    }
}

/// The process's Redis client: the threads' blocking connections, the I/O runtime of detached
/// writes and its multiplexed connections, and their shared health.
pub struct Redis {
    /// `Option` only so that `Drop` can shut it down from any context.
    io: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    conns: Arc<ArcSwapOption<Vec<RedisConn>>>,
    next: AtomicUsize,
    /// Where the threads' blocking connections go.
    target: SyncTarget,
    /// This client in the threads' connection lists; `alive` dies with it.
    id: u64,
    alive: Arc<()>,
    timeout: Duration,
    connect_timeout: Duration,
    prefix: String,
    health: Arc<Health>,
    replica_acks: u32,
    replica_ack_timeout_ms: u64,
    /// Where concurrent decisions' anti-replay scripts queue to share a write (`None`: each
    /// call writes on its own).
    combiner: Option<combine::Combiner>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            // Allowed anywhere, unlike dropping a runtime (e.g. from a worker thread).
            io.shutdown_background();
        }
    }
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

/// `EVALSHA <script's hash> <number of keys> <keys…>`: add the arguments, then send it with
/// [`Redis::call_script`].
pub(crate) fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

/// Sends `cmd` (an `EVALSHA` of `script`, see [`evalsha`]) and reads its answer; loads the script
/// and sends it again when Redis does not know it (after a restart or a `SCRIPT FLUSH`).
pub(crate) fn query_script(
    script: &Script,
    cmd: &Cmd,
    c: &mut dyn redis::ConnectionLike,
) -> RedisResult<Value> {
    match cmd.query::<Value>(c) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.prepare_invoke().load(c)?;
            cmd.query(c)
        }
        r => r,
    }
}

/// A batch's answers with every `NOSCRIPT` replaced by the answer of its command sent again,
/// once the scripts Redis forgot are loaded (those commands did not run).
fn reload_unknown_scripts(
    conn: &mut SyncConn,
    batch: &[Arc<combine::Waiter>],
    mut answers: Vec<Value>,
) -> RedisResult<Vec<Value>> {
    let unknown: Vec<usize> = (0..answers.len())
        .filter(|&i| {
            matches!(&answers[i], Value::ServerError(e)
                if e.kind() == Some(redis::ServerErrorKind::NoScript))
        })
        .collect();
    if unknown.is_empty() {
        return Ok(answers);
    }
    let mut loaded: Vec<&str> = Vec::new();
    let mut again = Vec::new();
    for &i in &unknown {
        let s = batch[i].script;
        if !loaded.contains(&s.get_hash()) {
            s.prepare_invoke().load(conn)?;
            loaded.push(s.get_hash());
        }
        again.extend_from_slice(&batch[i].packed);
    }
    let retried = redis::ConnectionLike::req_packed_commands(conn, &again, 0, unknown.len())?;
    for (i, v) in unknown.into_iter().zip(retried) {
        answers[i] = v;
    }
    Ok(answers)
}

/// How a call failed, for [`Redis::call`] to decide whether to run it again.
#[derive(Debug, Clone)]
enum Failed {
    /// The server refused the command without running it.
    NotRun(StoreError),
    /// No answer came: the command may or may not have run.
    NoAnswer(StoreError),
    Other(StoreError),
}

impl Failed {
    fn into_error(self) -> StoreError {
        match self {
            Failed::NotRun(e) | Failed::NoAnswer(e) | Failed::Other(e) => e,
        }
    }
}

/// Whether the server answered that it did not run the command (and another node, or the same
/// one a moment later, would).
fn not_run(e: &redis::RedisError) -> bool {
    use redis::RetryMethod as M;
    matches!(e.kind(), redis::ErrorKind::Server(_))
        && matches!(
            e.retry_method(),
            M::MovedRedirect | M::AskRedirect | M::WaitAndRetry | M::RefreshSlotsAndRetry
        )
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
        let target = if s.cluster_nodes.is_empty() {
            SyncTarget::Single(
                redis::Client::open(s.url.as_str())
                    .map_err(|e| format!("state.redis_url {:?}: {e}", s.url))?,
            )
        } else {
            SyncTarget::Cluster(Box::new(
                redis::cluster::ClusterClient::builder(s.cluster_nodes.clone())
                    .connection_timeout(s.connect_timeout)
                    .response_timeout(s.timeout)
                    .retries(0)
                    .build()
                    .map_err(|e| format!("state.redis_cluster_nodes: {e}"))?,
            ))
        };
        let redis = Arc::new(Redis {
            io: Some(io),
            handle,
            conns: conns.clone(),
            next: AtomicUsize::new(0),
            target,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
            timeout: s.timeout,
            connect_timeout: s.connect_timeout,
            prefix: s.prefix.clone(),
            replica_acks: s.replica_acks,
            replica_ack_timeout_ms: s.replica_ack_timeout.as_millis().max(1) as u64,
            combiner: (s.coalesce && s.cluster_nodes.is_empty() && s.replica_acks == 0)
                .then(combine::Combiner::default),
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

    /// The client of the one node (`None` on a cluster).
    fn single_client(&self) -> Option<redis::Client> {
        match &self.target {
            SyncTarget::Single(c) => Some(c.clone()),
            SyncTarget::Cluster(_) => None,
        }
    }

    /// Lives as long as this client: threads of its own end when it is gone.
    fn alive_handle(&self) -> Weak<()> {
        Arc::downgrade(&self.alive)
    }

    fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The client's counters (exported as metrics).
    pub fn counters(&self) -> &RedisCounters {
        &self.health.counters
    }

    /// Whether this is a Redis Cluster (keys of different slots cannot share a script).
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, SyncTarget::Cluster(_))
    }

    /// The bound on each call (`[state] redis_timeout_ms`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether calls are currently failing fast (cool-down after connection failures).
    pub fn cooling_down(&self) -> bool {
        self.health.open(mono_ms())
    }

    /// Fails fast (and counts it) during a cool-down.
    fn refuse_while_cooling_down(&self) -> Result<(), StoreError> {
        if self.cooling_down() {
            self.health.counters.fast_failures.inc();
            return Err(unavailable("unreachable (cooling down after failed calls)"));
        }
        Ok(())
    }

    fn conn(&self) -> Result<RedisConn, StoreError> {
        self.refuse_while_cooling_down()?;
        let guard = self.conns.load();
        let conns = guard
            .as_ref()
            .ok_or_else(|| unavailable("not connected yet"))?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        Ok(conns[i].clone())
    }

    /// This thread's blocking connection, taken out of its list for the call (a new one if the
    /// thread has none, or its last one failed).
    /// This thread's connection and when it was made (a new one if it has none).
    fn take_sync(&self) -> Result<(SyncConn, Instant), StoreError> {
        self.refuse_while_cooling_down()?;
        let mine = CONNS.with(|list| {
            let mut list = list.borrow_mut();
            let i = list.iter().position(|(id, ..)| *id == self.id)?;
            let (_, _, c, used, born) = list.swap_remove(i);
            Some((c, used, born))
        });
        if let Some((mut c, used, born)) = mine {
            if used.elapsed() < IDLE_CHECK || redis::ConnectionLike::check_connection(&mut c) {
                return Ok((c, born));
            }
            // Closed while idle: connect afresh below.
        }
        self.target
            .connect(self.connect_timeout, self.timeout)
            .map(|c| (c, Instant::now()))
            .map_err(|e| {
                self.health.counters.errors.inc();
                self.health.trip(mono_ms());
                unavailable(e)
            })
    }

    /// Gives a healthy connection back to this thread's list (and forgets the connections of
    /// clients that are gone).
    fn put_sync(&self, c: SyncConn, born: Instant) {
        CONNS.with(|list| {
            let mut list = list.borrow_mut();
            list.retain(|(_, alive, ..)| alive.strong_count() > 0);
            list.push((
                self.id,
                Arc::downgrade(&self.alive),
                c,
                Instant::now(),
                born,
            ));
        });
    }

    /// Runs `f` on this thread's blocking connection: at most the call timeout per read or write.
    ///
    /// The client never re-sends a command on its own (the cluster client has `retries(0)`): a
    /// command that got no answer may have run, and a blind re-send of a check-and-set would be
    /// judged against its own first write. `f` runs a second time, on a fresh connection, only
    /// when the server said it did not run the command (a cluster redirect, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `LOADING`, `MASTERDOWN`, `READONLY`); a fresh cluster connection reads the
    /// current slot map.
    pub fn call<T>(&self, f: impl Fn(&mut SyncConn) -> RedisResult<T>) -> Result<T, StoreError> {
        self.call_with(f, false)
    }

    /// [`call`](Self::call) for commands whose second run answers as their first did (the nonce
    /// and fingerprint scripts recognise their own earlier write by a per-call token): these also
    /// run again once, on a fresh connection, after getting no answer (a timeout or a dropped
    /// connection), so a slow answer costs the caller time, not a refusal.
    pub fn call_idempotent<T>(
        &self,
        f: impl Fn(&mut SyncConn) -> RedisResult<T>,
    ) -> Result<T, StoreError> {
        self.call_with(f, true)
    }

    /// [`call_idempotent`](Self::call_idempotent) for an anti-replay write to `key` (a nonce, a
    /// submission fingerprint, a spent challenge solution). With `[state] replica_acks` = n > 0,
    /// the write counts only once n replicas of `key`'s master have acknowledged it (`WAIT`, sent
    /// to that master after `f` on the same connection): a failover to a replica then cannot
    /// forget a nonce this engine accepted. Fewer acknowledgements within
    /// `replica_ack_timeout_ms` fail the call, and the step's `*_on_error` policy answers. The
    /// write itself stays on the master either way; the request it belonged to was refused.
    pub fn call_durable<T>(
        &self,
        key: &str,
        f: impl Fn(&mut SyncConn) -> RedisResult<T>,
    ) -> Result<T, StoreError> {
        if self.replica_acks == 0 {
            return self.call_idempotent(f);
        }
        let (want, ms) = (self.replica_acks, self.replica_ack_timeout_ms);
        let r = self.call_idempotent(|c| {
            let v = f(c)?;
            let mut wait = redis::cmd("WAIT");
            wait.arg(want).arg(ms);
            let acks: i64 = match c {
                SyncConn::Single(c) => wait.query(c)?,
                SyncConn::Cluster(c) => {
                    use redis::cluster_routing::{
                        Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
                    };
                    let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::with_key(key, SlotAddr::Master),
                    ));
                    redis::from_redis_value(c.route_command(&wait, to)?)?
                }
            };
            Ok((v, acks))
        })?;
        match r {
            (v, acks) if acks >= want as i64 => Ok(v),
            (_, acks) => {
                self.health.counters.ack_shortfalls.inc();
                Err(unavailable(format!(
                    "{acks} of {want} replica(s) acknowledged the write within {ms} ms"
                )))
            }
        }
    }

    fn call_with<T>(
        &self,
        f: impl Fn(&mut SyncConn) -> RedisResult<T>,
        idempotent: bool,
    ) -> Result<T, StoreError> {
        self.retrying(|| self.attempt(&f), idempotent)
    }

    /// Runs `once` again after a "not run" refusal, and (when `idempotent`) after no answer.
    fn retrying<T>(
        &self,
        once: impl Fn() -> Result<T, Failed>,
        idempotent: bool,
    ) -> Result<T, StoreError> {
        match once() {
            Ok(v) => Ok(v),
            Err(Failed::NotRun(_)) => once().map_err(Failed::into_error),
            Err(Failed::NoAnswer(_)) if idempotent => {
                self.health.counters.resent.inc();
                once().map_err(Failed::into_error)
            }
            Err(e) => Err(e.into_error()),
        }
    }

    /// An anti-replay script call to `key` (as [`call_durable`](Self::call_durable)) whose write
    /// is shared with the calls other decisions make at the same moment when this client
    /// coalesces (`[state] redis_coalesce`; see `combine.rs`). `cmd` is the `EVALSHA` of
    /// `script` (see [`evalsha`]).
    pub fn call_script(
        &self,
        key: &str,
        script: &'static Script,
        cmd: &Cmd,
    ) -> Result<Value, StoreError> {
        let Some(combiner) = &self.combiner else {
            return self.call_durable(key, |c| query_script(script, cmd, c));
        };
        let packed = cmd.get_packed_command();
        self.retrying(
            || {
                self.health.counters.calls.inc();
                combiner.run(script, packed.clone(), |b| self.send_batch(b))
            },
            true,
        )
    }

    /// Writes a batch of coalesced commands in one write on this thread's connection and reads
    /// their answers; a script Redis does not know (after a restart or a `SCRIPT FLUSH`) is
    /// loaded and its commands sent again (they did not run).
    fn send_batch(&self, batch: &[Arc<combine::Waiter>]) -> Vec<Result<Value, Failed>> {
        let (mut conn, born) = match self.take_sync() {
            Ok(c) => c,
            Err(e) => {
                return batch
                    .iter()
                    .map(|_| Err(Failed::Other(e.clone())))
                    .collect()
            }
        };
        self.health.counters.coalesced_writes.inc();
        self.health
            .counters
            .coalesced_commands
            .inc_by(batch.len() as u64);
        let mut buf = Vec::with_capacity(batch.iter().map(|w| w.packed.len()).sum());
        for w in batch {
            buf.extend_from_slice(&w.packed);
        }
        let sent = redis::ConnectionLike::req_packed_commands(&mut conn, &buf, 0, batch.len())
            .and_then(|answers| reload_unknown_scripts(&mut conn, batch, answers));
        match self.finish(sent, conn, born) {
            Ok(answers) => answers
                .into_iter()
                .map(|v| match v {
                    Value::ServerError(e) => {
                        let e = redis::RedisError::from(e);
                        self.health.counters.errors.inc();
                        Err(if not_run(&e) {
                            Failed::NotRun(unavailable(e))
                        } else {
                            Failed::Other(unavailable(e))
                        })
                    }
                    v => Ok(v),
                })
                .collect(),
            Err(f) => batch.iter().map(|_| Err(f.clone())).collect(),
        }
    }

    /// One run of `f`; a connection that failed or may be out of step is dropped.
    fn attempt<T>(&self, f: &impl Fn(&mut SyncConn) -> RedisResult<T>) -> Result<T, Failed> {
        let (mut conn, born) = self.take_sync().map_err(Failed::Other)?;
        self.health.counters.calls.inc();
        let r = f(&mut conn);
        self.finish(r, conn, born)
    }

    /// What a call's result says about it and its connection: the connection goes back to this
    /// thread's list unless it failed or may be out of step.
    fn finish<T>(&self, r: RedisResult<T>, conn: SyncConn, born: Instant) -> Result<T, Failed> {
        if !matches!(&r, Err(e) if e.is_timeout()) {
            self.health.record(&r);
        }
        match r {
            Ok(v) => {
                self.put_sync(conn, born);
                Ok(v)
            }
            Err(e) if e.is_timeout() => {
                // The answer may still arrive: this connection is out of step, drop it.
                self.health.timed_out();
                Err(Failed::NoAnswer(unavailable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                ))))
            }
            // A cluster node refused a new connection (a dead master): the command never left,
            // and this cluster connection's links to the other nodes are fine. Keep it for a
            // while, or every call that meets the dead node would cost a whole new cluster
            // connection (a slot map and a link to each node) and slow the live slots down too.
            Err(e)
                if e.is_connection_refusal()
                    && matches!(conn, SyncConn::Cluster(_))
                    && born.elapsed() < KEEP_WITH_A_DEAD_NODE
                    && redis::ConnectionLike::is_open(&conn) =>
            {
                self.put_sync(conn, born);
                Err(Failed::Other(unavailable(e)))
            }
            Err(e) if is_connection_error(&e) || !redis::ConnectionLike::is_open(&conn) => {
                Err(Failed::NoAnswer(unavailable(e)))
            }
            Err(e) if not_run(&e) => Err(Failed::NotRun(unavailable(e))),
            Err(e) => {
                self.put_sync(conn, born);
                Err(Failed::Other(unavailable(e)))
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
            .retries(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_outage_starts_a_cool_down_after_three_failures() {
        let h = Health::default();
        h.succeeded(1_000);
        // Three failures in a row, but Redis answered 10 ms ago: not yet.
        for t in [1_002, 1_005, 1_010] {
            h.trip(t);
        }
        assert!(!h.open(1_011));
        // Nothing has answered for the cool-down's length: the next failures open it.
        for t in [1_250, 1_251, 1_252] {
            h.trip(t);
        }
        assert!(h.open(1_253));
        assert!(!h.open(1_252 + COOL_DOWN_MS));
    }

    #[test]
    fn a_partial_outage_never_starts_one() {
        // One master of three down: every third call fails, the others succeed.
        let h = Health::default();
        for i in 0..3_000i64 {
            let now = 1_000 + i / 3;
            if i % 3 == 0 {
                h.trip(now);
            } else {
                h.succeeded(now);
            }
            assert!(!h.open(now), "cool-down at call {i}");
        }
        // Even three failures in a row (calls of several threads meeting the dead node) do not.
        for t in [2_001, 2_001, 2_002, 2_002] {
            h.trip(t);
        }
        assert!(!h.open(2_003));
    }

    #[test]
    fn a_redis_unreachable_from_the_start_trips_at_once() {
        let h = Health::default();
        for _ in 0..TRIP_AFTER {
            h.trip(5);
        }
        assert!(h.open(6));
    }
}
