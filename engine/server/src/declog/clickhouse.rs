//! The decision log in ClickHouse: rows batched by size and time into `RowBinary` inserts (the
//! official `clickhouse` crate, validation off so that ClickHouse 18.16 accepts them), an on-disk
//! spool while ClickHouse is slow or down, and the schema migrations.
//!
//! # Never slowing a decision, never losing a row
//!
//! The decision path only queues a row (see [`crate::declog`]); this sink runs on the log's writer
//! thread. A batch goes to ClickHouse when it holds `batch_rows` rows or is `batch_ms` old. When
//! an insert fails or times out, the batch is written to the spool — append-only segment files,
//! each one batch with a checksum, written to a temporary name, synced and renamed, so a crash
//! leaves whole segments only — and every later batch goes to the spool too, behind it, so order is
//! kept. The spool is replayed oldest first as soon as ClickHouse answers again (retried every
//! `retry_ms`), also after a restart of the engine. A segment is deleted only after its insert
//! succeeded; a replay after an insert that did reach ClickHouse but whose answer was lost is
//! absorbed by the table (a `ReplacingMergeTree` keyed by `decision_id`).
//!
//! When the spool reaches `spool_max_bytes` the declared `on_spool_full` policy applies
//! (`drop_newest` keeps what is spooled and counts the rows it refuses; `drop_oldest` deletes the
//! oldest segments to make room and counts their rows) — the only way rows are lost, always counted
//! (`rampart_decision_log_spool_dropped_rows_total`).
//!
//! # Field limits
//!
//! Caller-controlled strings are cut to documented limits at a character boundary (user agent
//! 512 bytes, reasons and shadow 2048, other fields 256) and control characters are replaced by
//! U+FFFD, so no value can make a batch fail or bloat the table.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::SpoolFull;
use crate::declog::DecisionRecord;
use crate::metrics::Metrics;

/// The migrations, in order (`dashboards/clickhouse/migrations/`); `{db}` is the database.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_decisions",
        include_str!("../../../../dashboards/clickhouse/migrations/0001_decisions.sql"),
    ),
    (
        "0002_decisions_minute",
        include_str!("../../../../dashboards/clickhouse/migrations/0002_decisions_minute.sql"),
    ),
    (
        "0003_decisions_request",
        include_str!("../../../../dashboards/clickhouse/migrations/0003_decisions_request.sql"),
    ),
    (
        "0004_decisions_device_id",
        include_str!("../../../../dashboards/clickhouse/migrations/0004_decisions_device_id.sql"),
    ),
    (
        "0005_decisions_key_id",
        include_str!("../../../../dashboards/clickhouse/migrations/0005_decisions_key_id.sql"),
    ),
    (
        "0006_decisions_challenge",
        include_str!("../../../../dashboards/clickhouse/migrations/0006_decisions_challenge.sql"),
    ),
];

/// The migrations on a ClickHouse cluster (`dashboards/clickhouse/cluster/`, `[decision_log]
/// clickhouse_cluster`): the same tables, replicated on every shard behind `Distributed` tables of
/// the single-server names, created with distributed DDL (`ON CLUSTER`). `{db}` and `{cluster}`
/// are filled in; a file may hold several statements, each ending with `;`.
pub const CLUSTER_MIGRATIONS: &[(&str, &str)] = &[
    (
        "cluster_0001_decisions",
        include_str!("../../../../dashboards/clickhouse/cluster/0001_decisions.sql"),
    ),
    (
        "cluster_0002_decisions_minute",
        include_str!("../../../../dashboards/clickhouse/cluster/0002_decisions_minute.sql"),
    ),
    (
        "cluster_0003_decisions_minute_digest",
        include_str!("../../../../dashboards/clickhouse/cluster/0003_decisions_minute_digest.sql"),
    ),
];

/// The statements of a migration file: split after each `;` that ends a line, without the parts
/// that hold only comments.
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut cur));
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().trim_end_matches(';').trim().to_string())
        .filter(|s| {
            s.lines()
                .any(|l| !l.trim().is_empty() && !l.trim().starts_with("--"))
        })
        .collect()
}

pub const TABLE: &str = "rampart_decisions";

#[derive(Debug, Clone)]
pub struct ChSettings {
    pub url: String,
    pub database: String,
    pub user: String,
    pub password: String,
    pub batch_rows: usize,
    pub batch_ms: u64,
    pub timeout: Duration,
    pub retry_ms: u64,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
    pub on_spool_full: SpoolFull,
    /// A cluster of the servers' `<remote_servers>`: the schema is created on it with distributed
    /// DDL, rows go to its `Distributed` table. None = one server.
    pub cluster: Option<String>,
}

/// One row of `rampart_decisions`, in column order (RowBinary is positional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clickhouse::Row)]
pub struct ChRow {
    pub time: u32,
    pub time_ms: u64,
    pub decision_id: String,
    pub app: String,
    pub method: String,
    pub route: String,
    pub user: String,
    pub ip: String,
    pub country: String,
    pub isp: String,
    pub device_type: String,
    pub ua_family: String,
    pub user_agent: String,
    pub ja3: String,
    pub tier: String,
    pub rule: String,
    /// Enum8: 1 allow, 2 challenge, 3 review, 4 deny.
    pub action: i8,
    pub code: String,
    pub status: u16,
    pub score: i32,
    pub reasons: String,
    pub shadow: String,
    pub ruleset_version: String,
    pub arm: String,
    pub latency_us: u32,
    pub degraded: u8,
    pub instance: String,
    /// The recorded request (JSON), or empty. Defaulted so spool segments written before the
    /// column existed still replay.
    #[serde(default)]
    pub request: String,
    /// The client's device id, or empty (migration 0004; defaulted for older spool segments).
    #[serde(default)]
    pub device_id: String,
    /// The signing key the signature matched, or empty (migration 0005; defaulted for older
    /// spool segments).
    #[serde(default)]
    pub key_id: String,
    /// `issued`, `solved`, `cleared` or empty (migration 0006; defaulted for older spool
    /// segments).
    #[serde(default)]
    pub challenge: String,
}

/// Longest stored value of most string fields, in bytes.
pub const MAX_FIELD: usize = 256;
pub const MAX_USER_AGENT: usize = 512;
pub const MAX_TEXT: usize = 2048;

/// Cuts `s` to at most `max` bytes at a character boundary and replaces control characters.
pub fn clean(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end]
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

fn opt(s: &Option<String>, max: usize) -> String {
    s.as_deref().map(|s| clean(s, max)).unwrap_or_default()
}

/// A coarse user-agent family for dashboards (the full string is kept beside it).
pub fn ua_family(ua: &str) -> &'static str {
    let l = ua.to_ascii_lowercase();
    const FAMILIES: [(&str, &str); 12] = [
        ("bot", "bot"),
        ("spider", "bot"),
        ("crawl", "bot"),
        ("curl/", "curl"),
        ("python", "python"),
        ("okhttp", "okhttp"),
        ("go-http", "go"),
        ("edg/", "edge"),
        ("firefox/", "firefox"),
        ("chrome/", "chrome"),
        ("safari/", "safari"),
        ("mozilla/", "other-browser"),
    ];
    if l.is_empty() {
        return "";
    }
    FAMILIES
        .iter()
        .find(|(needle, _)| l.contains(needle))
        .map(|(_, f)| *f)
        .unwrap_or("other")
}

impl ChRow {
    pub fn from_record(r: &DecisionRecord) -> ChRow {
        let json = |v: &dyn erased::Json| clean(&v.json(), MAX_TEXT);
        ChRow {
            time: (r.time_ms.max(0) / 1000) as u32,
            time_ms: r.time_ms.max(0) as u64,
            decision_id: clean(&r.decision_id, MAX_FIELD),
            app: clean(&r.app, MAX_FIELD),
            method: clean(&r.method, 16),
            route: clean(&r.route, MAX_FIELD),
            user: opt(&r.user, MAX_FIELD),
            ip: opt(&r.ip, 64),
            country: opt(&r.country, 64),
            isp: opt(&r.isp, MAX_FIELD),
            device_type: opt(&r.device_type, 64),
            ua_family: ua_family(r.user_agent.as_deref().unwrap_or("")).into(),
            user_agent: opt(&r.user_agent, MAX_USER_AGENT),
            ja3: opt(&r.ja3, MAX_FIELD),
            tier: r.tier.unwrap_or("").into(),
            rule: opt(&r.rule, MAX_FIELD),
            action: match r.action {
                rampart_core::Action::Allow => 1,
                rampart_core::Action::Challenge => 2,
                rampart_core::Action::Review => 3,
                rampart_core::Action::Deny => 4,
            },
            code: r.code.as_str().into(),
            status: r.status,
            score: r.score.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
            reasons: json(&r.reasons),
            shadow: json(&r.shadow),
            ruleset_version: clean(&r.ruleset_version, 64),
            arm: r.arm.into(),
            latency_us: r.latency_us.min(u32::MAX as u64) as u32,
            degraded: r.degraded as u8,
            instance: clean(&r.instance, MAX_FIELD),
            // Already bounded by `record_request_max_bytes`; JSON escapes control characters.
            request: r
                .request
                .as_ref()
                .map(|j| j.as_str().to_string())
                .unwrap_or_default(),
            device_id: opt(&r.device_id, MAX_FIELD),
            key_id: r
                .key_id
                .as_deref()
                .map(|k| clean(k, 64))
                .unwrap_or_default(),
            challenge: r.challenge.unwrap_or_default().to_string(),
        }
    }
}

mod erased {
    /// Serialises any of the record's list fields to JSON (object-safe).
    pub trait Json {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

pub fn client(s: &ChSettings) -> clickhouse::Client {
    let mut c = clickhouse::Client::default()
        .with_url(&s.url)
        .with_database(&s.database)
        .with_validation(false);
    if !s.user.is_empty() {
        c = c.with_user(&s.user);
    }
    if !s.password.is_empty() {
        c = c.with_password(&s.password);
    }
    if s.cluster.is_some() {
        // An insert into the Distributed table returns once every shard's replica has its rows,
        // and fails otherwise, so that the batch goes to the spool and is sent again. The
        // default (asynchronous forwarding from files on the receiving node) loses rows on
        // 18.16: a send cut by a replica that dies is taken for a broken file ("Attempt to read
        // after eof") and moved aside for good. A resent batch collapses in the replicated
        // ReplacingMergeTree (same decision ids, sharded by id).
        c = c.with_setting("insert_distributed_sync", "1");
    }
    c
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Applies the migrations not applied yet (recorded in `rampart_migrations`); returns the names
/// applied now.
pub fn migrate(s: &ChSettings) -> Result<Vec<String>, String> {
    let rt = runtime().map_err(|e| e.to_string())?;
    // On a cluster the migration creates the database itself, so it cannot be the session's
    // (every statement names it).
    let c = match s.cluster {
        Some(_) => client(s).with_database("default"),
        None => client(s),
    };
    rt.block_on(async {
        let run = |sql: String| {
            let c = c.clone();
            async move { c.query(&sql).execute().await }
        };
        let db = &s.database;
        let ddl = |sql: String| async move {
            tokio::time::timeout(s.timeout * 10, run(sql))
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        };
        let (list, book) = match &s.cluster {
            None => (
                MIGRATIONS,
                format!(
                    "CREATE TABLE IF NOT EXISTS {db}.rampart_migrations \
                     (name String, applied DateTime) ENGINE = TinyLog"
                ),
            ),
            Some(cluster) => {
                // Every server of the cluster holds the whole record (one replica set across
                // shards), so any node can be asked what was applied.
                ddl(format!(
                    "CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER {cluster}"
                ))
                .await?;
                (
                    CLUSTER_MIGRATIONS,
                    format!(
                        "CREATE TABLE IF NOT EXISTS {db}.rampart_migrations ON CLUSTER {cluster} \
                         (name String, applied DateTime) ENGINE = ReplicatedMergeTree(\
                         '/clickhouse/tables/{db}/rampart_migrations', '{{shard}}-{{replica}}') \
                         ORDER BY name"
                    ),
                )
            }
        };
        ddl(book).await?;
        let done: Vec<String> = tokio::time::timeout(
            s.timeout,
            c.query(&format!("SELECT name FROM {db}.rampart_migrations"))
                .fetch_all::<String>(),
        )
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let mut applied = Vec::new();
        for (name, sql) in list {
            if done.iter().any(|d| d == name) {
                continue;
            }
            let sql = sql
                .replace("{db}", db)
                .replace("{cluster}", s.cluster.as_deref().unwrap_or(""));
            for st in statements(&sql) {
                ddl(st).await.map_err(|e| format!("{name}: {e}"))?;
            }
            let record = c
                .query(&format!(
                    "INSERT INTO {db}.rampart_migrations (name, applied) VALUES (?, now())"
                ))
                .bind(*name)
                .execute();
            tokio::time::timeout(s.timeout, record)
                .await
                .map_err(|_| format!("{name}: timed out"))?
                .map_err(|e| format!("{name}: {e}"))?;
            applied.push(name.to_string());
        }
        Ok(applied)
    })
}

// ---------------------------------------------------------------------------------------------
// Spool

const MAGIC: &[u8; 4] = b"RSP1";
const HEADER: usize = 4 + 4 + 8 + 4;

struct Segment {
    path: PathBuf,
    bytes: u64,
    rows: u64,
}

/// Append-only batches on disk, oldest first.
struct Spool {
    dir: PathBuf,
    segments: VecDeque<Segment>,
    bytes: u64,
    next: u64,
    max_bytes: u64,
    policy: SpoolFull,
}

impl Spool {
    fn open(dir: &Path, max_bytes: u64, policy: SpoolFull) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let n = p.file_name()?.to_str()?;
                let seq = n
                    .strip_prefix("segment-")?
                    .strip_suffix(".rsp")?
                    .parse()
                    .ok()?;
                Some((seq, p))
            })
            .collect();
        found.sort();
        let mut s = Spool {
            dir: dir.to_path_buf(),
            segments: VecDeque::new(),
            bytes: 0,
            next: found.last().map(|(n, _)| n + 1).unwrap_or(0),
            max_bytes,
            policy,
        };
        for (_, path) in found {
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let rows = read_header(&path).map(|(rows, _, _)| rows).unwrap_or(0);
            s.bytes += bytes;
            s.segments.push_back(Segment { path, bytes, rows });
        }
        Ok(s)
    }

    fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn rows(&self) -> u64 {
        self.segments.iter().map(|s| s.rows).sum()
    }

    /// Writes a batch as a new segment. Returns the rows dropped by the full-spool policy.
    fn append(&mut self, rows: &[ChRow]) -> std::io::Result<u64> {
        let mut payload = Vec::with_capacity(rows.len() * 300);
        for r in rows {
            serde_json::to_writer(&mut payload, r)?;
            payload.push(b'\n');
        }
        let size = (HEADER + payload.len()) as u64;
        let mut dropped = 0;
        if self.bytes + size > self.max_bytes {
            match self.policy {
                SpoolFull::DropNewest => return Ok(rows.len() as u64),
                SpoolFull::DropOldest => {
                    while self.bytes + size > self.max_bytes {
                        let Some(old) = self.segments.pop_front() else {
                            return Ok(rows.len() as u64);
                        };
                        let _ = std::fs::remove_file(&old.path);
                        self.bytes -= old.bytes;
                        dropped += old.rows;
                    }
                }
            }
        }
        let mut buf = Vec::with_capacity(size as usize);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        buf.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        buf.extend_from_slice(&payload);
        let path = self.dir.join(format!("segment-{:012}.rsp", self.next));
        let tmp = self.dir.join(format!("segment-{:012}.tmp", self.next));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &path)?;
        self.next += 1;
        self.bytes += size;
        self.segments.push_back(Segment {
            path,
            bytes: size,
            rows: rows.len() as u64,
        });
        Ok(dropped)
    }

    /// The oldest segment's rows; a damaged segment is moved aside (`corrupt/`) and skipped.
    fn oldest(&mut self) -> Option<Result<Vec<ChRow>, (PathBuf, u64)>> {
        let seg = self.segments.front()?;
        Some(read_segment(&seg.path).map_err(|_| (seg.path.clone(), seg.rows)))
    }

    fn pop(&mut self) {
        if let Some(seg) = self.segments.pop_front() {
            let _ = std::fs::remove_file(&seg.path);
            self.bytes -= seg.bytes;
        }
    }

    fn quarantine(&mut self) {
        if let Some(seg) = self.segments.pop_front() {
            let dir = self.dir.join("corrupt");
            let _ = std::fs::create_dir_all(&dir);
            if let Some(name) = seg.path.file_name() {
                let _ = std::fs::rename(&seg.path, dir.join(name));
            }
            self.bytes -= seg.bytes;
        }
    }
}

fn read_header(path: &Path) -> std::io::Result<(u64, u64, u32)> {
    use std::io::Read;
    let mut h = [0u8; HEADER];
    std::fs::File::open(path)?.read_exact(&mut h)?;
    if &h[..4] != MAGIC {
        return Err(std::io::Error::other("not a spool segment"));
    }
    let rows = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")) as u64;
    let len = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes"));
    Ok((rows, len, crc))
}

fn read_segment(path: &Path) -> std::io::Result<Vec<ChRow>> {
    let (rows, len, crc) = read_header(path)?;
    let data = std::fs::read(path)?;
    let payload = data
        .get(HEADER..)
        .filter(|p| p.len() as u64 == len)
        .ok_or_else(|| std::io::Error::other("truncated segment"))?;
    if crc32fast::hash(payload) != crc {
        return Err(std::io::Error::other("checksum mismatch"));
    }
    let out: Vec<ChRow> = payload
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(serde_json::from_slice)
        .collect::<Result<_, _>>()
        .map_err(std::io::Error::other)?;
    if out.len() as u64 != rows {
        return Err(std::io::Error::other("row count mismatch"));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Sink

pub struct ChSink {
    s: ChSettings,
    client: clickhouse::Client,
    rt: tokio::runtime::Runtime,
    buf: Vec<ChRow>,
    buf_since: Instant,
    spool: Spool,
    retry_at: Instant,
    migrated: bool,
    metrics: Arc<Metrics>,
}

impl ChSink {
    pub fn open(s: ChSettings, metrics: Arc<Metrics>) -> std::io::Result<ChSink> {
        let spool = Spool::open(&s.spool_dir, s.spool_max_bytes, s.on_spool_full)?;
        let sink = ChSink {
            client: client(&s),
            rt: runtime()?,
            buf: Vec::with_capacity(s.batch_rows),
            buf_since: Instant::now(),
            spool,
            retry_at: Instant::now(),
            migrated: false,
            metrics,
            s,
        };
        sink.update_gauges();
        Ok(sink)
    }

    fn update_gauges(&self) {
        self.metrics.log_spool_bytes.set(self.spool.bytes as i64);
        self.metrics.log_spool_rows.set(self.spool.rows() as i64);
    }

    /// Queues rows; a full batch is sent (or spooled) at once.
    pub fn push(&mut self, rows: impl IntoIterator<Item = ChRow>) {
        if self.buf.is_empty() {
            self.buf_since = Instant::now();
        }
        self.buf.extend(rows);
        if self.buf.len() >= self.s.batch_rows {
            self.flush();
        }
    }

    /// Called when the writer is idle: sends an old enough batch, replays the spool when due.
    pub fn tick(&mut self) {
        if !self.buf.is_empty()
            && self.buf_since.elapsed() >= Duration::from_millis(self.s.batch_ms)
        {
            self.flush();
        } else if !self.spool.is_empty() && Instant::now() >= self.retry_at {
            self.drain();
        }
    }

    /// Sends the current batch now (to the spool when ClickHouse is away or the spool is not
    /// empty, so that order is kept).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.buf);
        if self.spool.is_empty() && Instant::now() >= self.retry_at {
            match self.insert(&batch) {
                Ok(()) => {
                    self.metrics.log_written.inc_by(batch.len() as u64);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, rows = batch.len(), "clickhouse insert failed; spooling");
                    self.backoff();
                }
            }
        }
        self.spool_batch(&batch);
        self.drain();
    }

    fn spool_batch(&mut self, batch: &[ChRow]) {
        match self.spool.append(batch) {
            Ok(dropped) => {
                let kept = batch.len() as u64 - dropped.min(batch.len() as u64);
                self.metrics.log_spooled.inc_by(kept);
                if dropped > 0 {
                    self.metrics.log_spool_dropped.inc_by(dropped);
                    tracing::error!(
                        rows = dropped,
                        "decision log spool full: rows dropped (on_spool_full)"
                    );
                }
            }
            Err(e) => {
                self.metrics.log_write_errors.inc_by(batch.len() as u64);
                tracing::error!(error = %e, rows = batch.len(), "cannot write the decision log spool");
            }
        }
        self.update_gauges();
    }

    /// Replays spooled segments, oldest first, until one fails.
    fn drain(&mut self) {
        if Instant::now() < self.retry_at {
            return;
        }
        while let Some(seg) = self.spool.oldest() {
            match seg {
                Ok(rows) => match self.insert(&rows) {
                    Ok(()) => {
                        self.metrics.log_written.inc_by(rows.len() as u64);
                        self.metrics.log_unspooled.inc_by(rows.len() as u64);
                        self.spool.pop();
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "clickhouse still unavailable; spool kept");
                        self.backoff();
                        break;
                    }
                },
                Err((path, rows)) => {
                    tracing::error!(segment = %path.display(), rows, "damaged spool segment moved to corrupt/");
                    self.metrics.log_spool_dropped.inc_by(rows);
                    self.spool.quarantine();
                }
            }
        }
        self.update_gauges();
    }

    fn backoff(&mut self) {
        self.metrics.log_retries.inc();
        self.retry_at = Instant::now() + Duration::from_millis(self.s.retry_ms);
    }

    fn insert(&mut self, rows: &[ChRow]) -> Result<(), String> {
        if !self.migrated {
            migrate(&self.s)?;
            self.migrated = true;
        }
        let client = &self.client;
        self.rt.block_on(async {
            let work = async {
                // The client is bound to the database.
                let mut ins = client.insert::<ChRow>(TABLE).await?;
                for r in rows {
                    ins.write(r).await?;
                }
                ins.end().await
            };
            match tokio::time::timeout(self.s.timeout, work).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "no answer within {} ms",
                    self.s.timeout.as_millis()
                )),
            }
        })
    }

    /// On shutdown: the last batch goes out (or to the spool), and the spool is tried once more.
    pub fn close(&mut self) {
        self.flush();
        self.retry_at = Instant::now();
        self.drain();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_have_no_bind_markers() {
        // The client binds `?` as a query argument: one in a migration (even in a comment) makes
        // it fail with "unbound query argument" and the log spools instead of inserting.
        for (name, sql) in super::MIGRATIONS.iter().chain(super::CLUSTER_MIGRATIONS) {
            assert!(!sql.contains('?'), "{name} contains '?'");
        }
    }

    #[test]
    fn a_cluster_migration_splits_into_its_statements() {
        let st = super::statements(super::CLUSTER_MIGRATIONS[0].1);
        assert_eq!(st.len(), 2, "{st:?}");
        assert!(
            st[0].contains("rampart_decisions_local ON CLUSTER"),
            "{}",
            st[0]
        );
        assert!(st[1].contains("ENGINE = Distributed("), "{}", st[1]);
        assert!(st.iter().all(|s| !s.ends_with(';')));
        // A single-server migration is one statement, as it was.
        for (name, sql) in super::MIGRATIONS {
            assert_eq!(super::statements(sql).len(), 1, "{name}");
        }
    }
}
