//! Where the control plane keeps its state: rule set versions, the rollout state (stable,
//! candidate, history, lists), the audit log, the session key and revoked sessions.
//!
//! - [`FileStore`] (local state): files under `[admin] state_dir`, which several instances on one
//!   host may share (changes are serialised by a lock file, `control.lock`) — `versions/<version>.json`,
//!   `state.json` (written owner-only to a temporary file, synced, then renamed; it holds the
//!   secrets of signing keys added through the admin API), `audit.jsonl` (appended and
//!   synced per entry), `session.key`, `revoked.json`.
//! - [`RedisStore`] (`[state] backend = "redis"`): keys under `<prefix>:ctl:` in one hash slot
//!   (`{ctl}`), so every instance sees the same state. Redis must persist (AOF or RDB) for
//!   versions and the audit log to survive a Redis restart; the store refuses nothing, it is as
//!   durable as the Redis it uses.
//!
//! The rollout state is one document with a generation number. A change is written only if the
//! stored generation is still the one it was derived from (compare-and-set), so two operators (or
//! two instances) never overwrite each other's change.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{AuditEntry, ControlState, VersionDoc, VersionMeta};
use crate::redis_state::Redis;

/// A control store failure (I/O, Redis, or a document that does not parse).
#[derive(Debug, Clone, thiserror::Error)]
#[error("control store: {0}")]
pub struct StoreError(pub String);

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

pub trait ControlStore: Send + Sync {
    /// The rollout state (the default state when none was saved yet).
    fn load(&self) -> Result<ControlState, StoreError>;
    /// The stored generation, cheaply (0 when none was saved yet).
    fn generation(&self) -> Result<u64, StoreError>;
    /// Saves `next` if the stored generation is `next.generation - 1`; `false` when it is not.
    fn save(&self, next: &ControlState) -> Result<bool, StoreError>;
    fn put_version(&self, v: &VersionDoc) -> Result<(), StoreError>;
    fn get_version(&self, version: &str) -> Result<Option<VersionDoc>, StoreError>;
    /// Every version's metadata, oldest first.
    fn versions(&self) -> Result<Vec<VersionMeta>, StoreError>;
    /// Appends an entry; fills in its sequence number.
    fn append_audit(&self, e: &mut AuditEntry) -> Result<(), StoreError>;
    /// Every audit entry of the live log, oldest first (exported entries are not read).
    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError>;
    /// The stored lines as written, exports first (for `rampart audit verify`), and the head.
    fn audit_lines(&self) -> Result<AuditLines, StoreError>;
    /// The key sessions are signed with (created on first use, then shared).
    fn session_key(&self) -> Result<Vec<u8>, StoreError>;
    fn revoke(&self, session: &str, until_ms: i64) -> Result<(), StoreError>;
    fn is_revoked(&self, session: &str, now_ms: i64) -> Result<bool, StoreError>;
}

/// Entries the live audit log keeps unless `[admin] audit_max_entries` says otherwise.
pub use crate::config::DEFAULT_AUDIT_MAX;

/// The audit log as stored: `(where, line)` in order, exports first, and the recorded head (the
/// hash of the last line written).
#[derive(Debug, Default)]
pub struct AuditLines {
    pub lines: Vec<(String, String)>,
    pub head: Option<String>,
}

/// Reads exported audit files (`*.jsonl` in `dir`, in name order: their names start with the
/// zero-padded first sequence number) into `out`.
pub fn read_exports(dir: &Path, out: &mut Vec<(String, String)>) -> Result<(), StoreError> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(format!("{}: {e}", dir.display()))),
    };
    files.sort_by_key(|p| export_first_seq(p));
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| err(format!("{}: {e}", f.display())))?;
        for (i, l) in text.lines().enumerate() {
            out.push((format!("{}:{}", f.display(), i + 1), l.to_string()));
        }
    }
    Ok(())
}

/// The first sequence number in an export's name (`audit-<first>-<last>.jsonl`).
fn export_first_seq(p: &Path) -> u64 {
    p.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.split('-').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Writes exported entries to `<dir>/audit-<first>-<last>.jsonl` (atomically; an export of the
/// same entries already there is kept).
fn write_export(dir: &Path, first: u64, last: u64, body: &[u8]) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let path = dir.join(format!("audit-{first:012}-{last:012}.jsonl"));
    if path.exists() {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    (|| -> std::io::Result<()> {
        write_private(&tmp, body)?;
        std::fs::rename(&tmp, &path)
    })()
    .map_err(|e| err(format!("{}: {e}", path.display())))
}

/// The sequence number of a stored audit line (0 when it does not parse).
fn line_seq(line: &str) -> u64 {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_str::<Seq>(line).map_or(0, |s| s.seq)
}

/// Parses audit lines; one that does not parse is skipped with a warning (`rampart audit verify`
/// names it), never silently.
fn parse_audit<'a>(lines: impl Iterator<Item = &'a str>, from: &str) -> Vec<AuditEntry> {
    let mut bad = 0;
    let out = lines
        .filter_map(|l| {
            let e = serde_json::from_str(l).ok();
            bad += e.is_none() as usize;
            e
        })
        .collect();
    if bad > 0 {
        tracing::warn!(
            from,
            bad,
            "audit entries that do not parse were left out; run `rampart audit verify`"
        );
    }
    out
}

fn valid_version_id(v: &str) -> bool {
    !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Local state in a directory. Several processes may share it (instances on one host, or on a
/// file system with working advisory locks): every read-modify-write holds an exclusive lock on
/// `<dir>/control.lock` as well as this process's own mutex.
pub struct FileStore {
    dir: PathBuf,
    lock: Mutex<()>,
    /// The live audit log's tail as this process last wrote it, with the file's length just
    /// after: a different length means another process appended since, and the tail is read again.
    audit_tail: Mutex<Option<(AuditTail, u64)>>,
    audit_max: usize,
    /// `state.json`'s identity (inode, length, modification time) and generation when last read:
    /// every save renames a new file into place, so an unchanged identity means an unchanged
    /// generation, and polling does not parse the document (lists included) twice a second.
    seen: Mutex<Option<(FileId, u64)>>,
}

type FileId = (u64, u64, Option<std::time::SystemTime>);

/// The live audit log's last entry (sequence number, hash of its line), its first entry's
/// sequence number, and how many entries it holds.
#[derive(Debug, Clone)]
struct AuditTail {
    seq: u64,
    head: String,
    first: u64,
    count: usize,
}

fn file_id(m: &std::fs::Metadata) -> FileId {
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(m);
    #[cfg(not(unix))]
    let ino = 0;
    (ino, m.len(), m.modified().ok())
}

impl FileStore {
    pub fn open(dir: &Path) -> Result<FileStore, StoreError> {
        std::fs::create_dir_all(dir.join("versions"))
            .map_err(|e| err(format!("{}: {e}", dir.display())))?;
        Ok(FileStore {
            dir: dir.to_path_buf(),
            lock: Mutex::new(()),
            audit_tail: Mutex::new(None),
            audit_max: DEFAULT_AUDIT_MAX,
            seen: Mutex::new(None),
        })
    }

    /// Keeps at most `max` entries in `audit.jsonl`; older ones move to `audit/`.
    pub fn with_audit_max(mut self, max: usize) -> FileStore {
        self.audit_max = max.max(1);
        self
    }

    /// The live audit log's tail: read from the file (a last line cut short by a crash
    /// mid-append is removed first) and, when the file is empty, from `audit.head`.
    fn read_audit_tail(&self, path: &Path) -> Result<AuditTail, StoreError> {
        let e = |e: std::io::Error| err(format!("{}: {e}", path.display()));
        let mut text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(x) if x.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(x) => return Err(e(x)),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            let keep = text.rfind('\n').map_or(0, |i| i + 1);
            tracing::warn!(file = %path.display(), "removing an audit line cut short by a crash");
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(keep as u64))
                .map_err(e)?;
            text.truncate(keep);
        }
        let lines: Vec<&str> = text.lines().collect();
        if let Some(last) = lines.last() {
            return Ok(AuditTail {
                seq: lines.iter().map(|l| line_seq(l)).max().unwrap_or(0),
                head: super::audit::line_hash(last),
                first: line_seq(lines[0]),
                count: lines.len(),
            });
        }
        let head = std::fs::read_to_string(self.dir.join("audit.head")).unwrap_or_default();
        let (seq, head) = head.trim().split_once(' ').unwrap_or(("0", ""));
        Ok(AuditTail {
            seq: seq.parse().unwrap_or(0),
            head: head.to_string(),
            first: 0,
            count: 0,
        })
    }

    fn read_json<T: DeserializeOwned>(&self, path: &Path) -> Result<Option<T>, StoreError> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| err(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(err(format!("{}: {e}", path.display()))),
        }
    }

    /// Writes atomically: a temporary file (owner-only: the state holds the secrets of keys added
    /// through the admin API), synced, renamed over the target.
    fn write_json<T: Serialize>(&self, path: &Path, v: &T) -> Result<(), StoreError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        let body = serde_json::to_vec_pretty(v).map_err(err)?;
        (|| -> std::io::Result<()> {
            write_private(&tmp, &body)?;
            std::fs::rename(&tmp, path)
        })()
        .map_err(|e| err(format!("{}: {e}", path.display())))
    }

    /// This process's mutex, then the directory's lock file (released when the guard drops).
    fn guard(&self) -> Result<(std::sync::MutexGuard<'_, ()>, std::fs::File), StoreError> {
        let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join("control.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        Ok((g, f))
    }
}

impl ControlStore for FileStore {
    fn load(&self) -> Result<ControlState, StoreError> {
        Ok(self
            .read_json(&self.dir.join("state.json"))?
            .unwrap_or_default())
    }

    fn generation(&self) -> Result<u64, StoreError> {
        let path = self.dir.join("state.json");
        let id = match std::fs::metadata(&path) {
            Ok(m) => file_id(&m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
        };
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, generation)) = *seen {
            if known == id {
                return Ok(generation);
            }
        }
        let generation = self.load()?.generation;
        *seen = Some((id, generation));
        Ok(generation)
    }

    fn save(&self, next: &ControlState) -> Result<bool, StoreError> {
        let _g = self.guard()?;
        if self.load()?.generation + 1 != next.generation {
            return Ok(false);
        }
        self.write_json(&self.dir.join("state.json"), next)?;
        Ok(true)
    }

    fn put_version(&self, v: &VersionDoc) -> Result<(), StoreError> {
        if !valid_version_id(&v.meta.version) {
            return Err(err("bad version id"));
        }
        let path = self
            .dir
            .join("versions")
            .join(format!("{}.json", v.meta.version));
        if path.exists() {
            return Ok(());
        }
        self.write_json(&path, v)
    }

    fn get_version(&self, version: &str) -> Result<Option<VersionDoc>, StoreError> {
        if !valid_version_id(version) {
            return Ok(None);
        }
        self.read_json(&self.dir.join("versions").join(format!("{version}.json")))
    }

    fn versions(&self) -> Result<Vec<VersionMeta>, StoreError> {
        let mut out = Vec::new();
        let dir = self.dir.join("versions");
        for e in std::fs::read_dir(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))? {
            let p = e.map_err(err)?.path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            if let Some(v) = self.read_json::<VersionDoc>(&p)? {
                out.push(v.meta);
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.version).cmp(&(b.created_ms, &b.version)));
        Ok(out)
    }

    /// Appends `e` chained to the last entry (its `prev` is that line's hash) and records the
    /// new head in `audit.head`. A full log first moves to `audit/audit-<first>-<last>.jsonl`
    /// (the export: nothing is dropped) and a new file continues the chain.
    fn append_audit(&self, e: &mut AuditEntry) -> Result<(), StoreError> {
        let _g = self.guard()?;
        let path = self.dir.join("audit.jsonl");
        let len = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let mut cached = self.audit_tail.lock().unwrap_or_else(|e| e.into_inner());
        let mut tail = match &*cached {
            Some((t, at)) if *at == len() => t.clone(),
            _ => self.read_audit_tail(&path)?,
        };
        if tail.count >= self.audit_max {
            let to = self
                .dir
                .join("audit")
                .join(format!("audit-{:012}-{:012}.jsonl", tail.first, tail.seq));
            std::fs::create_dir_all(self.dir.join("audit"))
                .and_then(|()| std::fs::rename(&path, &to))
                .map_err(|e| err(format!("{}: {e}", to.display())))?;
            tail.count = 0;
        }
        e.seq = tail.seq + 1;
        e.prev = Some(tail.head.clone());
        let line = serde_json::to_string(e).map_err(err)?;
        let hash = super::audit::line_hash(&line);
        (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            f.write_all(format!("{line}\n").as_bytes())?;
            f.sync_data()
        })()
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
        let head = self.dir.join("audit.head");
        write_private(
            &head.with_extension("head.tmp"),
            format!("{} {hash}\n", e.seq).as_bytes(),
        )
        .and_then(|()| std::fs::rename(head.with_extension("head.tmp"), &head))
        .map_err(|e| err(format!("{}: {e}", head.display())))?;
        let first = if tail.count == 0 { e.seq } else { tail.first };
        *cached = Some((
            AuditTail {
                seq: e.seq,
                head: hash,
                first,
                count: tail.count + 1,
            },
            len(),
        ));
        Ok(())
    }

    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError> {
        let path = self.dir.join("audit.jsonl");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
        };
        Ok(parse_audit(text.lines(), &path.display().to_string()))
    }

    fn audit_lines(&self) -> Result<AuditLines, StoreError> {
        let _g = self.guard()?;
        let mut lines = Vec::new();
        read_exports(&self.dir.join("audit"), &mut lines)?;
        let path = self.dir.join("audit.jsonl");
        match std::fs::read_to_string(&path) {
            Ok(t) => {
                for (i, l) in t.lines().enumerate() {
                    lines.push((format!("{}:{}", path.display(), i + 1), l.to_string()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
        }
        let head = std::fs::read_to_string(self.dir.join("audit.head"))
            .ok()
            .and_then(|h| h.split_whitespace().nth(1).map(str::to_string));
        Ok(AuditLines { lines, head })
    }

    fn session_key(&self) -> Result<Vec<u8>, StoreError> {
        let _g = self.guard()?;
        let path = self.dir.join("session.key");
        match std::fs::read(&path) {
            Ok(k) if k.len() >= 32 => return Ok(k),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
        }
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(err)?;
        write_private(&path, &key).map_err(|e| err(format!("{}: {e}", path.display())))?;
        Ok(key.to_vec())
    }

    fn revoke(&self, session: &str, until_ms: i64) -> Result<(), StoreError> {
        let _g = self.guard()?;
        let path = self.dir.join("revoked.json");
        let mut r: Vec<(String, i64)> = self.read_json(&path)?.unwrap_or_default();
        let now = crate::clock::now_ms();
        r.retain(|(_, until)| *until > now);
        r.push((session.to_string(), until_ms));
        self.write_json(&path, &r)
    }

    fn is_revoked(&self, session: &str, now_ms: i64) -> Result<bool, StoreError> {
        let r: Vec<(String, i64)> = self
            .read_json(&self.dir.join("revoked.json"))?
            .unwrap_or_default();
        Ok(r.iter().any(|(s, until)| s == session && *until > now_ms))
    }
}

/// Writes a file readable by its owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Shared state in Redis.
pub struct RedisStore {
    redis: Arc<Redis>,
    p: String,
    audit_max: usize,
    /// Where this instance writes the audit entries it moves out of Redis.
    audit_exports: Option<PathBuf>,
}

/// Appends an audit line if the head is still the one it was chained to (another instance may
/// have appended meanwhile: the caller chains again). KEYS: list, seq, head. ARGV: the head
/// expected (`''` when none is recorded), the line, its hash, its sequence number. Returns the
/// list's length, or -1.
const AUDIT_APPEND: &str = r#"
local h = redis.call('GET', KEYS[3]) or ''
if h ~= ARGV[1] then return -1 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[3])
return redis.call('LLEN', KEYS[1])
"#;

/// Removes the `ARGV[1]` oldest audit lines if the oldest is still `ARGV[2]` (they were
/// exported; another instance may have moved them first).
const AUDIT_TRIM: &str = r#"
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return 0 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
return 1
"#;

/// Saves the state when the stored generation is the expected one (compare-and-set).
const CAS_SCRIPT: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[2])
return 1
"#;

impl RedisStore {
    pub fn new(redis: Arc<Redis>) -> RedisStore {
        let p = format!("{}:ctl:{{ctl}}", redis.prefix());
        RedisStore {
            redis,
            p,
            audit_max: DEFAULT_AUDIT_MAX,
            audit_exports: None,
        }
    }

    /// Keeps at most `max` entries (plus a tenth) in Redis; older ones are written to
    /// `exports/audit-<first>-<last>.jsonl` first, then removed. Without `exports` nothing is
    /// removed.
    pub fn with_audit(mut self, max: usize, exports: PathBuf) -> RedisStore {
        self.audit_max = max.max(1);
        self.audit_exports = Some(exports);
        self
    }

    /// Moves the oldest `n` entries to an export file, then out of Redis.
    fn export_audit(&self, n: usize) -> Result<(), StoreError> {
        let Some(dir) = &self.audit_exports else {
            return Ok(());
        };
        let k = self.key("audit");
        let k2 = k.clone();
        let old: Vec<String> = self
            .redis
            .call(move |c| {
                redis::cmd("LRANGE")
                    .arg(&k2)
                    .arg(0)
                    .arg(n as i64 - 1)
                    .query(c)
            })
            .map_err(err)?;
        let (Some(first), Some(last)) = (old.first(), old.last()) else {
            return Ok(());
        };
        let mut body = old.join("\n");
        body.push('\n');
        write_export(dir, line_seq(first), line_seq(last), body.as_bytes())?;
        let first = first.clone();
        let _: i64 = self
            .redis
            .call(move |c| {
                redis::Script::new(AUDIT_TRIM)
                    .key(&k)
                    .arg(n)
                    .arg(&first)
                    .invoke(c)
            })
            .map_err(err)?;
        Ok(())
    }

    fn key(&self, k: &str) -> String {
        format!("{}:{k}", self.p)
    }

    fn get(&self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        self.redis
            .call(move |c| redis::cmd("GET").arg(&key).query::<Option<Vec<u8>>>(c))
            .map_err(err)
    }
}

impl ControlStore for RedisStore {
    fn load(&self) -> Result<ControlState, StoreError> {
        match self.get(self.key("state"))? {
            Some(b) => serde_json::from_slice(&b).map_err(err),
            None => Ok(ControlState::default()),
        }
    }

    fn generation(&self) -> Result<u64, StoreError> {
        Ok(self
            .get(self.key("gen"))?
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0))
    }

    fn save(&self, next: &ControlState) -> Result<bool, StoreError> {
        let body = serde_json::to_string(next).map_err(err)?;
        let (kg, ks) = (self.key("gen"), self.key("state"));
        let g = next.generation;
        let n: i64 = self
            .redis
            .call(move |c| {
                redis::Script::new(CAS_SCRIPT)
                    .key(&kg)
                    .key(&ks)
                    .arg(g - 1)
                    .arg(g)
                    .arg(&body)
                    .invoke(c)
            })
            .map_err(err)?;
        Ok(n == 1)
    }

    fn put_version(&self, v: &VersionDoc) -> Result<(), StoreError> {
        let body = serde_json::to_string(v).map_err(err)?;
        let meta = serde_json::to_string(&v.meta).map_err(err)?;
        let (kv, ki) = (
            self.key(&format!("v:{}", v.meta.version)),
            self.key("versions"),
        );
        let member = v.meta.version.clone();
        let _: () = self
            .redis
            .call(move |c| {
                redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(&kv)
                    .arg(&body)
                    .arg("NX")
                    .ignore()
                    .cmd("HSETNX")
                    .arg(&ki)
                    .arg(&member)
                    .arg(&meta)
                    .ignore()
                    .query(c)
            })
            .map_err(err)?;
        Ok(())
    }

    fn get_version(&self, version: &str) -> Result<Option<VersionDoc>, StoreError> {
        if !valid_version_id(version) {
            return Ok(None);
        }
        match self.get(self.key(&format!("v:{version}")))? {
            Some(b) => serde_json::from_slice(&b).map(Some).map_err(err),
            None => Ok(None),
        }
    }

    fn versions(&self) -> Result<Vec<VersionMeta>, StoreError> {
        let k = self.key("versions");
        let all: Vec<String> = self
            .redis
            .call(move |c| redis::cmd("HVALS").arg(&k).query(c))
            .map_err(err)?;
        let mut out: Vec<VersionMeta> = all
            .iter()
            .filter_map(|s| serde_json::from_str(s).ok())
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.version).cmp(&(b.created_ms, &b.version)));
        Ok(out)
    }

    /// Appends `e` chained to the last entry, atomically against other instances (compare the
    /// head and append in one script; chained again when another instance got there first).
    fn append_audit(&self, e: &mut AuditEntry) -> Result<(), StoreError> {
        let (kl, ks, kh) = (
            self.key("audit"),
            self.key("audit:seq"),
            self.key("audit:head"),
        );
        for _ in 0..32 {
            let (k1, k2) = (ks.clone(), kh.clone());
            let (seq, head): (Option<u64>, Option<String>) = self
                .redis
                .call(move |c| redis::cmd("MGET").arg(&k1).arg(&k2).query(c))
                .map_err(err)?;
            let prev = match &head {
                Some(h) => h.clone(),
                // The first chained entry of a log kept before the chain: chained to its last line.
                None => {
                    let k = kl.clone();
                    let last: Option<String> = self
                        .redis
                        .call(move |c| redis::cmd("LINDEX").arg(&k).arg(-1).query(c))
                        .map_err(err)?;
                    last.map(|l| super::audit::line_hash(&l))
                        .unwrap_or_default()
                }
            };
            e.seq = seq.unwrap_or(0) + 1;
            e.prev = Some(prev);
            let line = serde_json::to_string(e).map_err(err)?;
            let hash = super::audit::line_hash(&line);
            let (k1, k2, k3, expected, n) = (
                kl.clone(),
                ks.clone(),
                kh.clone(),
                head.unwrap_or_default(),
                e.seq,
            );
            let len: i64 = self
                .redis
                .call(move |c| {
                    redis::Script::new(AUDIT_APPEND)
                        .key(&k1)
                        .key(&k2)
                        .key(&k3)
                        .arg(&expected)
                        .arg(&line)
                        .arg(&hash)
                        .arg(n)
                        .invoke(c)
                })
                .map_err(err)?;
            if len < 0 {
                continue;
            }
            let len = len as usize;
            if len > self.audit_max + self.audit_max / 10 {
                if let Err(x) = self.export_audit(len - self.audit_max) {
                    tracing::error!(error = %x, "cannot export old audit entries; they stay in Redis");
                }
            }
            return Ok(());
        }
        Err(err("audit log: too many concurrent appends"))
    }

    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError> {
        let k = self.key("audit");
        let all: Vec<String> = self
            .redis
            .call(move |c| redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(c))
            .map_err(err)?;
        Ok(parse_audit(all.iter().map(String::as_str), "redis"))
    }

    fn audit_lines(&self) -> Result<AuditLines, StoreError> {
        let mut lines = Vec::new();
        if let Some(dir) = &self.audit_exports {
            read_exports(dir, &mut lines)?;
        }
        let (k, kh) = (self.key("audit"), self.key("audit:head"));
        let all: Vec<String> = self
            .redis
            .call(move |c| redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(c))
            .map_err(err)?;
        let head: Option<String> = self
            .redis
            .call(move |c| redis::cmd("GET").arg(&kh).query(c))
            .map_err(err)?;
        // Exports of entries still in Redis (written just before a trim that lost a race) are
        // not read twice.
        let kept = all.first().map(|l| line_seq(l)).unwrap_or(u64::MAX);
        lines.retain(|(_, l)| line_seq(l) < kept);
        for (i, l) in all.into_iter().enumerate() {
            lines.push((format!("redis:{}", i + 1), l));
        }
        Ok(AuditLines { lines, head })
    }

    fn session_key(&self) -> Result<Vec<u8>, StoreError> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(err)?;
        let k = self.key("session-key");
        let fresh = hex::encode(key);
        let k2 = k.clone();
        let _: Option<String> = self
            .redis
            .call(move |c| redis::cmd("SET").arg(&k2).arg(&fresh).arg("NX").query(c))
            .map_err(err)?;
        let stored = self.get(k)?.ok_or_else(|| err("session key vanished"))?;
        hex::decode(stored).map_err(err)
    }

    fn revoke(&self, session: &str, until_ms: i64) -> Result<(), StoreError> {
        let k = self.key(&format!("revoked:{session}"));
        let ttl = (until_ms - crate::clock::now_ms()).max(1);
        let _: () = self
            .redis
            .call(move |c| redis::cmd("SET").arg(&k).arg(1).arg("PX").arg(ttl).query(c))
            .map_err(err)?;
        Ok(())
    }

    fn is_revoked(&self, session: &str, _now_ms: i64) -> Result<bool, StoreError> {
        Ok(self.get(self.key(&format!("revoked:{session}")))?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stores on one directory stand for two processes: the lock file is locked per open
    /// file, so they exclude each other as two processes would.
    #[test]
    fn two_processes_sharing_a_directory_never_overwrite_each_other() {
        let dir = std::env::temp_dir().join(format!("rampart-filestore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b) = (
            FileStore::open(&dir).unwrap(),
            FileStore::open(&dir).unwrap(),
        );
        // Compare-and-set: of two changes derived from the same generation, one is saved.
        let base = a.load().unwrap();
        let mut next = base.clone();
        next.generation = base.generation + 1;
        next.lists_version = 1;
        let saved = std::thread::scope(|s| {
            let one = s.spawn(|| a.save(&next).unwrap());
            let two = s.spawn(|| b.save(&next).unwrap());
            [one.join().unwrap(), two.join().unwrap()]
        });
        assert_eq!(saved.iter().filter(|x| **x).count(), 1, "{saved:?}");
        assert_eq!(b.generation().unwrap(), 1);
        // Audit entries appended by both get distinct, gapless sequence numbers.
        let entry = || AuditEntry {
            seq: 0,
            time_ms: 1,
            actor: "t".into(),
            role: crate::auth::Role::Admin,
            via: "system".into(),
            action: "test".into(),
            target: String::new(),
            before: None,
            after: None,
            detail: serde_json::Value::Null,
            prev: None,
        };
        std::thread::scope(|s| {
            for st in [&a, &b] {
                s.spawn(move || {
                    for _ in 0..50 {
                        st.append_audit(&mut entry()).unwrap();
                    }
                });
            }
        });
        let seqs: Vec<u64> = a.audit().unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
        // And one chain.
        let log = b.audit_lines().unwrap();
        let r = super::super::audit::verify_chain(
            log.lines.iter().map(|(at, l)| (at.as_str(), l.as_str())),
            log.head.as_deref(),
        );
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        // One session key for both.
        assert_eq!(a.session_key().unwrap(), b.session_key().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The live log keeps at most its bound; older entries move to export files, nothing is lost,
    /// and the chain runs through the exports. Before, `audit.jsonl` grew for good.
    #[test]
    fn the_audit_log_is_bounded_exported_and_chained() {
        let dir = std::env::temp_dir().join(format!("rampart-audit-bound-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let st = FileStore::open(&dir).unwrap().with_audit_max(10);
        for i in 0..35 {
            let mut e = AuditEntry {
                seq: 0,
                time_ms: i,
                actor: "t".into(),
                role: crate::auth::Role::Admin,
                via: "system".into(),
                action: "test".into(),
                target: format!("{i}"),
                before: None,
                after: None,
                detail: serde_json::Value::Null,
                prev: None,
            };
            st.append_audit(&mut e).unwrap();
            assert!(st.audit().unwrap().len() <= 10);
        }
        let log = st.audit_lines().unwrap();
        assert_eq!(log.lines.len(), 35, "every entry kept, in exports or live");
        let exports = std::fs::read_dir(dir.join("audit")).unwrap().count();
        assert_eq!(exports, 3);
        let verify = |log: &AuditLines| {
            super::super::audit::verify_chain(
                log.lines.iter().map(|(at, l)| (at.as_str(), l.as_str())),
                log.head.as_deref(),
            )
        };
        assert!(
            verify(&log).problems.is_empty(),
            "{:?}",
            verify(&log).problems
        );
        // An edit inside an export is found.
        let first = dir
            .join("audit")
            .join("audit-000000000001-000000000010.jsonl");
        let text = std::fs::read_to_string(&first).unwrap();
        std::fs::write(&first, text.replace("\"target\":\"3\"", "\"target\":\"x\"")).unwrap();
        let r = verify(&st.audit_lines().unwrap());
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(
            r.problems[0].contains("entry 5 does not chain to entry 4"),
            "{:?}",
            r.problems
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
