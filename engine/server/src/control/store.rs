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
    /// Every audit entry, oldest first.
    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError>;
    /// The key sessions are signed with (created on first use, then shared).
    fn session_key(&self) -> Result<Vec<u8>, StoreError>;
    fn revoke(&self, session: &str, until_ms: i64) -> Result<(), StoreError>;
    fn is_revoked(&self, session: &str, now_ms: i64) -> Result<bool, StoreError>;
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
    /// The last audit sequence number this process appended, and the log's length just after:
    /// a different length means another process appended since, and the number is read again.
    audit_seq: Mutex<Option<(u64, u64)>>,
    /// `state.json`'s identity (inode, length, modification time) and generation when last read:
    /// every save renames a new file into place, so an unchanged identity means an unchanged
    /// generation, and polling does not parse the document (lists included) twice a second.
    seen: Mutex<Option<(FileId, u64)>>,
}

type FileId = (u64, u64, Option<std::time::SystemTime>);

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
            audit_seq: Mutex::new(None),
            seen: Mutex::new(None),
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

    fn append_audit(&self, e: &mut AuditEntry) -> Result<(), StoreError> {
        let _g = self.guard()?;
        let path = self.dir.join("audit.jsonl");
        let len = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let mut seq = self.audit_seq.lock().unwrap_or_else(|e| e.into_inner());
        let next = match *seq {
            Some((s, at)) if at == len() => s + 1,
            _ => self.audit()?.last().map_or(1, |l| l.seq + 1),
        };
        e.seq = next;
        let mut line = serde_json::to_vec(e).map_err(err)?;
        line.push(b'\n');
        (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            f.write_all(&line)?;
            f.sync_data()
        })()
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
        *seq = Some((next, len()));
        Ok(())
    }

    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError> {
        let path = self.dir.join("audit.jsonl");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
        };
        // A line cut short by a crash mid-append is skipped, not fatal.
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
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
}

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
        RedisStore { redis, p }
    }

    fn key(&self, k: &str) -> String {
        format!("{}:{k}", self.p)
    }

    fn get(&self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        self.redis
            .call(move |c| redis::cmd("GET").arg(key).query::<Option<Vec<u8>>>(c))
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
                    .key(kg)
                    .key(ks)
                    .arg(g - 1)
                    .arg(g)
                    .arg(body)
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
                    .arg(body)
                    .arg("NX")
                    .ignore()
                    .cmd("HSETNX")
                    .arg(&ki)
                    .arg(&member)
                    .arg(meta)
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
            .call(move |c| redis::cmd("HVALS").arg(k).query(c))
            .map_err(err)?;
        let mut out: Vec<VersionMeta> = all
            .iter()
            .filter_map(|s| serde_json::from_str(s).ok())
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.version).cmp(&(b.created_ms, &b.version)));
        Ok(out)
    }

    fn append_audit(&self, e: &mut AuditEntry) -> Result<(), StoreError> {
        let ks = self.key("audit:seq");
        let seq: u64 = self
            .redis
            .call(move |c| redis::cmd("INCR").arg(ks).query(c))
            .map_err(err)?;
        e.seq = seq;
        let line = serde_json::to_string(e).map_err(err)?;
        let kl = self.key("audit");
        let _: i64 = self
            .redis
            .call(move |c| redis::cmd("RPUSH").arg(kl).arg(line).query(c))
            .map_err(err)?;
        Ok(())
    }

    fn audit(&self) -> Result<Vec<AuditEntry>, StoreError> {
        let k = self.key("audit");
        let all: Vec<String> = self
            .redis
            .call(move |c| redis::cmd("LRANGE").arg(k).arg(0).arg(-1).query(c))
            .map_err(err)?;
        let mut out: Vec<AuditEntry> = all
            .iter()
            .filter_map(|s| serde_json::from_str(s).ok())
            .collect();
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    fn session_key(&self) -> Result<Vec<u8>, StoreError> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(err)?;
        let k = self.key("session-key");
        let fresh = hex::encode(key);
        let k2 = k.clone();
        let _: Option<String> = self
            .redis
            .call(move |c| redis::cmd("SET").arg(k2).arg(fresh).arg("NX").query(c))
            .map_err(err)?;
        let stored = self.get(k)?.ok_or_else(|| err("session key vanished"))?;
        hex::decode(stored).map_err(err)
    }

    fn revoke(&self, session: &str, until_ms: i64) -> Result<(), StoreError> {
        let k = self.key(&format!("revoked:{session}"));
        let ttl = (until_ms - crate::clock::now_ms()).max(1);
        let _: () = self
            .redis
            .call(move |c| redis::cmd("SET").arg(k).arg(1).arg("PX").arg(ttl).query(c))
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
        // One session key for both.
        assert_eq!(a.session_key().unwrap(), b.session_key().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
