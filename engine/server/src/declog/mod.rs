//! The decision log: one background thread fed through a bounded queue writes every decision
//! either to ClickHouse (`[decision_log] clickhouse_url`, see [`crate::declog::clickhouse`]) or to the embedded
//! local log — append-only JSON-lines files rotated by size — and keeps an in-memory ring of
//! recent decisions.
//!
//! The decision path only does a non-blocking `try_send`: a full queue drops the row and counts it
//! (`rampart_decision_log_rows_dropped_total`) rather than slowing decisions. On shutdown the queue
//! is drained before the process exits.

pub mod clickhouse;
pub(crate) mod query;
pub mod summary;

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rampart_core::model::{Action, Code, Reason, ShadowHit};
use serde::Serialize;

use crate::config::DecisionLogConfig;
use crate::metrics::Metrics;

/// One row of the decision log (the same fields the ClickHouse table will hold).
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    pub time_ms: i64,
    pub decision_id: String,
    pub app: String,
    pub method: String,
    pub route: String,
    pub user: Option<String>,
    pub ip: Option<String>,
    pub device_id: Option<String>,
    pub country: Option<String>,
    pub isp: Option<String>,
    pub device_type: Option<String>,
    pub user_agent: Option<String>,
    pub ja3: Option<String>,
    pub tier: Option<&'static str>,
    pub rule: Option<String>,
    pub action: Action,
    pub code: Code,
    pub status: u16,
    pub reasons: Vec<Reason>,
    pub shadow: Vec<ShadowHit>,
    pub ruleset_version: String,
    pub arm: &'static str,
    pub latency_us: u64,
    pub degraded: bool,
    pub instance: Arc<str>,
    pub score: i64,
    /// The rule-visible request as JSON (`[decision_log] record_request`), for backtests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<RecordedJson>,
    /// The signing key the signature matched (none when the signature step refused or was not
    /// reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<Arc<str>>,
    /// Where the request stood with challenges ([`rampart_core::model::Verdict::challenge_state`]):
    /// `issued`, `solved`, `cleared`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<&'static str>,
}

/// JSON text made by `serde_json` (the only way to build one), so a log line can hold it as it
/// is. Serialised as a string (the ring of recent decisions shows it so).
#[derive(Debug, Clone)]
pub struct RecordedJson {
    text: String,
    /// Whether a log line may hold it as an object: not when it nests so deep that the line,
    /// two levels deeper, would pass `serde_json`'s nesting limit (128) and the queries could not
    /// read the row back. Such a request is kept as a string, as older logs kept every one.
    inline: bool,
}

impl Serialize for RecordedJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Deepest nesting of a recorded request a log line holds as an object.
const INLINE_MAX_DEPTH: usize = 64;

/// How deep `v` nests (a scalar 0, `[]` 1, `[[1]]` 2), counted no further than one past
/// [`INLINE_MAX_DEPTH`].
pub fn nesting(v: &serde_json::Value) -> usize {
    fn walk(v: &serde_json::Value, cap: usize) -> usize {
        use serde_json::Value;
        let inner = |items: &mut dyn Iterator<Item = &Value>| match cap {
            0 => 0,
            _ => items.map(|x| walk(x, cap - 1)).max().unwrap_or(0),
        };
        match v {
            Value::Array(a) => 1 + inner(&mut a.iter()),
            Value::Object(o) => 1 + inner(&mut o.values()),
            _ => 0,
        }
    }
    walk(v, INLINE_MAX_DEPTH)
}

impl RecordedJson {
    /// `v` as JSON text; `depth` is how deep its values nest (at most [`INLINE_MAX_DEPTH`] for a
    /// line to hold it as an object).
    pub fn of(v: &impl Serialize, depth: usize) -> Option<RecordedJson> {
        serde_json::to_string(v).ok().map(|text| RecordedJson {
            text,
            inline: depth <= INLINE_MAX_DEPTH,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// How long the writer lets rows gather after each batch.
const LINGER: Duration = Duration::from_millis(5);

/// Rows written (and sent to ClickHouse) per batch at most.
const MAX_BATCH: usize = 4096;

enum Msg {
    Row(Box<DecisionRecord>),
    Flush(SyncSender<()>),
    Stop,
}

pub struct DecisionLog {
    tx: SyncSender<Msg>,
    /// The local log's per-minute summary, for stats (see [`summary`]).
    pub(crate) summary: Mutex<summary::LocalSummary>,
    ring: Arc<Mutex<VecDeque<DecisionRecord>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    submitted: AtomicU64,
    metrics: Arc<Metrics>,
    /// Held while the log is open: a second engine on the same directory is refused at start
    /// (it would interleave files and, with local state, hide that two instances dedup apart).
    _lock: std::fs::File,
}

/// The name of the lock file in the log directory.
pub const LOCK_FILE: &str = ".lock";

/// Takes the directory's lock, or says who holds it.
pub(crate) fn lock_dir(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    match f.try_lock() {
        Ok(()) => {
            f.set_len(0)?;
            f.rewind()?;
            write!(f, "{}", std::process::id())?;
            Ok(f)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            Err(std::io::Error::other(format!(
                "already in use by another rampart process (pid {}); give each instance its own \
                 [decision_log] dir",
                pid.trim()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

impl DecisionLog {
    pub fn start(cfg: &DecisionLogConfig, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        std::fs::create_dir_all(&cfg.dir)?;
        let lock = lock_dir(&cfg.dir)?;
        let ch = match &cfg.clickhouse_url {
            None => None,
            Some(_) => {
                let settings = ch_settings(cfg);
                if cfg.migrate {
                    match crate::declog::clickhouse::migrate(&settings) {
                        Ok(applied) if !applied.is_empty() => {
                            tracing::info!(?applied, "clickhouse schema migrated")
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(
                            error = %e,
                            "clickhouse unreachable at start: decisions are spooled until it answers"
                        ),
                    }
                }
                Some(crate::declog::clickhouse::ChSink::open(
                    settings,
                    metrics.clone(),
                )?)
            }
        };
        let (tx, rx) = sync_channel(cfg.queue_size);
        let ring = Arc::new(Mutex::new(VecDeque::with_capacity(cfg.ring_size)));
        let mut w = Writer {
            dir: cfg.dir.clone(),
            max_file_bytes: cfg.max_file_bytes,
            max_files: cfg.max_files,
            ring_size: cfg.ring_size,
            ring: ring.clone(),
            metrics: metrics.clone(),
            file: None,
            file_bytes: 0,
            seq: 0,
            ch,
        };
        // Fail at start (not later) when the directory is not writable.
        if w.ch.is_none() {
            w.open_next()?;
        }
        let writer = std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || w.run(rx))?;
        Ok(DecisionLog {
            tx,
            summary: Mutex::new(summary::LocalSummary::default()),
            ring,
            writer: Mutex::new(Some(writer)),
            submitted: AtomicU64::new(0),
            metrics,
            _lock: lock,
        })
    }

    /// Queues a row without blocking; a full queue drops it and counts the drop.
    pub fn submit(&self, rec: DecisionRecord) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(Msg::Row(Box::new(rec))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.metrics.log_dropped.inc();
            }
        }
    }

    /// The newest `limit` decisions, newest first.
    pub fn recent(&self, limit: usize) -> Vec<DecisionRecord> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().rev().take(limit).cloned().collect()
    }

    /// Waits until every row queued so far is written and flushed.
    pub fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }

    /// Drains the queue and stops the writer.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(h) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }

    pub fn queue_depth(&self) -> u64 {
        let m = &self.metrics;
        // Rows written from the spool were counted as spooled first.
        let done = m.log_written.get().saturating_sub(m.log_unspooled.get()) + m.log_spooled.get();
        self.submitted
            .load(Ordering::Relaxed)
            .saturating_sub(done)
            .saturating_sub(self.metrics.log_dropped.get())
            .saturating_sub(self.metrics.log_write_errors.get())
    }
}

struct Writer {
    dir: PathBuf,
    max_file_bytes: u64,
    max_files: usize,
    ring_size: usize,
    ring: Arc<Mutex<VecDeque<DecisionRecord>>>,
    metrics: Arc<Metrics>,
    file: Option<BufWriter<File>>,
    file_bytes: u64,
    seq: u64,
    /// The ClickHouse sink, instead of the local files.
    ch: Option<crate::declog::clickhouse::ChSink>,
}

/// The ClickHouse sink's settings from `[decision_log]`.
pub fn ch_settings(cfg: &DecisionLogConfig) -> crate::declog::clickhouse::ChSettings {
    crate::declog::clickhouse::ChSettings {
        url: cfg.clickhouse_url.clone().unwrap_or_default(),
        database: cfg.clickhouse_database.clone(),
        user: cfg.clickhouse_user.clone(),
        password: cfg
            .clickhouse_password
            .clone()
            .or_else(|| {
                cfg.clickhouse_password_env
                    .as_ref()
                    .and_then(|v| std::env::var(v).ok())
            })
            .unwrap_or_default(),
        batch_rows: cfg.batch_rows,
        batch_ms: cfg.batch_ms,
        timeout: Duration::from_millis(cfg.insert_timeout_ms),
        retry_ms: cfg.retry_ms,
        spool_dir: cfg
            .spool_dir
            .clone()
            .unwrap_or_else(|| cfg.dir.join("spool")),
        spool_max_bytes: cfg.spool_max_bytes,
        on_spool_full: cfg.on_spool_full,
        cluster: cfg.clickhouse_cluster.clone(),
    }
}

impl Writer {
    fn run(&mut self, rx: Receiver<Msg>) {
        let mut batch: Vec<DecisionRecord> = Vec::with_capacity(1024);
        loop {
            let first = rx.recv_timeout(Duration::from_millis(100));
            let mut stop = false;
            let mut acks = Vec::new();
            let mut take = |m: Msg, batch: &mut Vec<DecisionRecord>, stop: &mut bool| match m {
                Msg::Row(r) => batch.push(*r),
                Msg::Flush(a) => acks.push(a),
                Msg::Stop => *stop = true,
            };
            match first {
                Ok(m) => take(m, &mut batch, &mut stop),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(ch) = self.ch.as_mut() {
                        ch.tick();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => stop = true,
            }
            // Drain what is already queued (bounded batch), without waiting.
            while batch.len() < MAX_BATCH && !stop {
                match rx.try_recv() {
                    Ok(m) => take(m, &mut batch, &mut stop),
                    Err(_) => break,
                }
            }
            if stop {
                while let Ok(m) = rx.try_recv() {
                    let mut ignore = false;
                    take(m, &mut batch, &mut ignore);
                }
            }
            let batch_len = batch.len();
            self.write_batch(&mut batch);
            if let Some(ch) = self.ch.as_mut() {
                if stop {
                    ch.close();
                } else if !acks.is_empty() {
                    ch.flush();
                } else {
                    ch.tick();
                }
            }
            let flushed = !acks.is_empty();
            // A full batch means more is waiting: no pause then.
            let full = batch_len >= MAX_BATCH;
            for a in acks {
                let _ = a.send(());
            }
            if stop {
                if let Some(f) = self.file.as_mut() {
                    let _ = f.flush();
                }
                return;
            }
            // Let rows gather before the next wait: a writer parked in `recv` is woken (a futex
            // call and a context switch) by every row sent, which under load cost the request
            // path more than writing the rows. The queue holds far more than this many ms of rows.
            if !flushed && !full {
                std::thread::sleep(LINGER);
            }
        }
    }

    fn write_batch(&mut self, batch: &mut Vec<DecisionRecord>) {
        if batch.is_empty() {
            return;
        }
        if let Some(ch) = self.ch.as_mut() {
            ch.push(
                batch
                    .iter()
                    .map(crate::declog::clickhouse::ChRow::from_record),
            );
            self.remember(batch);
            return;
        }
        let mut line = Vec::with_capacity(1024);
        for rec in batch.iter_mut() {
            line.clear();
            if !file_line(rec, &mut line) {
                self.metrics.log_write_errors.inc();
                continue;
            }
            if self.file_bytes + line.len() as u64 > self.max_file_bytes && self.file_bytes > 0 {
                if let Err(e) = self.open_next() {
                    tracing::error!(error = %e, "decision log: cannot rotate");
                }
            }
            match self.file.as_mut().map(|f| f.write_all(&line)) {
                Some(Ok(())) => {
                    self.file_bytes += line.len() as u64;
                    self.metrics.log_written.inc();
                }
                _ => {
                    self.metrics.log_write_errors.inc();
                }
            }
        }
        if let Some(f) = self.file.as_mut() {
            if f.flush().is_err() {
                self.metrics.log_write_errors.inc();
            }
        }
        self.remember(batch);
    }

    /// Moves the batch into the ring of recent decisions.
    fn remember(&mut self, batch: &mut Vec<DecisionRecord>) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        for rec in batch.drain(..) {
            if ring.len() >= self.ring_size {
                ring.pop_front();
            }
            if self.ring_size > 0 {
                ring.push_back(rec);
            }
        }
    }

    fn open_next(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        let now = crate::clock::now_ms();
        self.seq += 1;
        let path = self
            .dir
            .join(format!("decisions-{now:013}-{:06}.jsonl", self.seq));
        let f = OpenOptions::new().create(true).append(true).open(&path)?;
        self.file = Some(BufWriter::with_capacity(256 * 1024, f));
        self.file_bytes = 0;
        prune(&self.dir, self.max_files);
        Ok(())
    }
}

/// One line of the local log: the record as a JSON object, its recorded request (already JSON
/// text) set in as an object rather than escaped into a string (unless it nests too deep, see
/// [`RecordedJson`]). Escaping it was most of the
/// writer thread's CPU, and the writer shares the cores with the decision path. False when the
/// record cannot be serialised (nothing is written then).
fn file_line(rec: &mut DecisionRecord, line: &mut Vec<u8>) -> bool {
    let request = rec.request.take();
    let ok = serde_json::to_writer(&mut *line, &*rec).is_ok();
    if let (true, Some(r), Some(b'}')) = (ok, request.as_ref(), line.last()) {
        line.pop();
        line.extend_from_slice(b",\"request\":");
        if r.inline {
            line.extend_from_slice(r.as_str().as_bytes());
        } else if serde_json::to_writer(&mut *line, r.as_str()).is_err() {
            line.extend_from_slice(b"null");
        }
        line.push(b'}');
    }
    rec.request = request;
    line.push(b'\n');
    ok
}

/// Keeps the newest `keep` log files.
fn prune(dir: &Path, keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("decisions-") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    if files.len() > keep {
        for p in &files[..files.len() - keep] {
            let _ = std::fs::remove_file(p);
        }
    }
}
