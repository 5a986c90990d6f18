//! Local anti-replay state across restarts (`[state] backend = "local"`): a restart must not
//! reopen the replay window.
//!
//! - **Graceful stop** (SIGTERM, SIGINT): once the server has stopped taking requests, every
//!   app's nonce filter (with its seed) or exact store, and its fingerprints, are written to
//!   `<snapshot_dir>/snapshot.bin` (a temporary file, synced, renamed; a CRC-32 over the whole).
//!   The next start reads it back when the configuration still matches (same nonce mode, same
//!   filter sizing per app) and deletes it: the replays of what was accepted before the stop are
//!   still `REPLAY_DUPLICATE`.
//! - **Unclean stop** (kill -9, a crash, a power cut): nothing was saved. While the engine runs,
//!   `<snapshot_dir>/running` holds a heartbeat (Unix ms, written and synced every 500 ms by a
//!   thread of its own) and is removed only after a successful save. Found at start, it says the
//!   last stop was unclean and about when: requests may have been accepted up to
//!   `heartbeat + 2 s`. With `[state] restart_quarantine = true` (the default) the engine then
//!   refuses, with `STORE_UNAVAILABLE`, every timestamp whose acceptance span began before that
//!   bound ([`rampart_core::Engine::set_restart_quarantine`]); the quarantine ends by itself
//!   2 × window later. A snapshot that cannot be used (another nonce mode or sizing, a damaged
//!   file) is treated the same way, from the moment it was saved.
//!
//! The directory is locked by the running engine, like the decision log's.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rampart_core::replay::bloom::SlicedBloom;
use rampart_core::replay::fingerprint::LocalFingerprintStore;
use rampart_core::replay::nonce::{BloomNonceStore, ExactNonceStore};

use crate::config::Validated;

const SNAPSHOT: &str = "snapshot.bin";
const RUNNING: &str = "running";
const MAGIC: &[u8] = b"RAMPART-REPLAY-STATE v1\n";
/// How often the heartbeat is written.
pub(crate) const HEARTBEAT_MS: u64 = 500;
/// How long after its last heartbeat a stopped engine may still have accepted requests.
const HEARTBEAT_SLACK_MS: i64 = 2_000;

/// An app's in-process nonce store, as the snapshot knows it.
#[derive(Clone)]
pub(crate) enum LocalNonces {
    Bloom(Arc<BloomNonceStore>),
    Exact(Arc<ExactNonceStore>),
}

/// The in-process stores a snapshot covers, per app.
#[derive(Clone, Default)]
pub(crate) struct LocalStores {
    pub nonces: Vec<(String, LocalNonces)>,
    pub fingerprints: Vec<(String, Arc<LocalFingerprintStore>)>,
}

/// What an earlier run left in the snapshot directory.
pub(crate) enum Prior {
    /// No snapshot and no sign of an earlier run.
    Fresh,
    /// The snapshot of a graceful stop.
    Snapshot(Vec<u8>),
    /// The stores cannot know what was accepted before this instant (Unix ms).
    Unknown { since_ms: i64, why: String },
}

/// What the stores know after [`build`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    /// No snapshot and no sign of an earlier run.
    Fresh,
    /// A snapshot of a graceful stop, read back: records restored.
    Restored { saved_at_ms: i64, records: usize },
    /// The stores cannot know what was accepted before this instant (Unix ms).
    Unknown { since_ms: i64, why: String },
}

/// The snapshot directory, locked while the engine runs.
pub(crate) struct Persist {
    dir: PathBuf,
    _lock: std::fs::File,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

impl Persist {
    /// Locks `dir` (creating it), takes what an earlier run left there, and marks this run as
    /// started. Returns the snapshot's bytes to build the stores from ([`build`]), or why the
    /// stores cannot know the past.
    pub fn open(dir: &Path, now_ms: i64) -> Result<(Persist, Prior), String> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let lock = crate::declog::lock_dir(dir).map_err(|e| {
            io_err(
                dir,
                e.to_string().replace(
                    "give each instance its own [decision_log] dir",
                    "give each instance its own [state] snapshot_dir",
                ),
            )
        })?;
        let p = Persist {
            dir: dir.to_path_buf(),
            _lock: lock,
        };
        let running = p.dir.join(RUNNING);
        let snapshot = p.dir.join(SNAPSHOT);
        let prior = if running.exists() {
            // The last run did not stop cleanly: whatever snapshot lies here is older than it.
            let since_ms = std::fs::read_to_string(&running)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .map(|hb| hb.saturating_add(HEARTBEAT_SLACK_MS))
                .unwrap_or(now_ms)
                .min(now_ms);
            let _ = std::fs::remove_file(&snapshot);
            Prior::Unknown {
                since_ms,
                why:
                    "the last run stopped without saving its state (killed, crashed or lost power)"
                        .into(),
            }
        } else {
            match std::fs::read(&snapshot) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Prior::Fresh,
                Err(e) => Prior::Unknown {
                    since_ms: now_ms,
                    why: io_err(&snapshot, e),
                },
                Ok(bytes) => {
                    // Read once: a later unclean stop must not find it and trust it.
                    let _ = std::fs::remove_file(&snapshot);
                    Prior::Snapshot(bytes)
                }
            }
        };
        p.heartbeat(now_ms)?;
        Ok((p, prior))
    }

    /// Writes the heartbeat (this run is alive at `now_ms`), synced.
    pub fn heartbeat(&self, now_ms: i64) -> Result<(), String> {
        let path = self.dir.join(RUNNING);
        (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            write!(f, "{now_ms}")?;
            f.sync_data()
        })()
        .map_err(|e| io_err(&path, e))
    }

    /// Saves every store (graceful stop), then removes the heartbeat: the next start reads the
    /// snapshot instead of quarantining.
    pub fn save(&self, stores: &LocalStores, now_ms: i64) -> Result<usize, String> {
        let (bytes, records) = snapshot(stores, now_ms).map_err(|e| e.to_string())?;
        let tmp = self.dir.join(format!("{SNAPSHOT}.tmp"));
        let path = self.dir.join(SNAPSHOT);
        crate::control::store::write_private(&tmp, &bytes).map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        sync_dir(&self.dir);
        std::fs::remove_file(self.dir.join(RUNNING)).map_err(|e| io_err(&self.dir, e))?;
        sync_dir(&self.dir);
        Ok(records)
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    saved_at_ms: i64,
    mode: String,
    apps: Vec<String>,
}

fn mode_of(stores: &LocalStores) -> &'static str {
    match stores.nonces.first() {
        Some((_, LocalNonces::Exact(_))) => "exact",
        _ => "bloom",
    }
}

/// The snapshot file: magic, a JSON header line, each app's nonce store and fingerprints, a
/// CRC-32 of everything before it.
fn snapshot(stores: &LocalStores, now_ms: i64) -> std::io::Result<(Vec<u8>, usize)> {
    let mut out: Vec<u8> = Vec::new();
    out.extend_from_slice(MAGIC);
    let header = Header {
        saved_at_ms: now_ms,
        mode: mode_of(stores).into(),
        apps: stores.nonces.iter().map(|(a, _)| a.clone()).collect(),
    };
    serde_json::to_writer(&mut out, &header)?;
    out.push(b'\n');
    let mut records = 0;
    for (_, n) in &stores.nonces {
        match n {
            LocalNonces::Bloom(b) => {
                b.filter().write_to(&mut out)?;
                records += 1;
            }
            LocalNonces::Exact(e) => {
                let live = e.live_entries(now_ms);
                records += live.len();
                out.write_all(&(live.len() as u64).to_le_bytes())?;
                for (k, exp) in live {
                    out.write_all(&(k.len() as u32).to_le_bytes())?;
                    out.write_all(&k)?;
                    out.write_all(&exp.to_le_bytes())?;
                }
            }
        }
    }
    for (_, f) in &stores.fingerprints {
        let live = f.live_entries(now_ms);
        records += live.len();
        out.write_all(&(live.len() as u64).to_le_bytes())?;
        for (fp, exp) in live {
            out.write_all(&fp.to_le_bytes())?;
            out.write_all(&exp.to_le_bytes())?;
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok((out, records))
}

/// The snapshot's body (CRC checked) and header.
fn parse(bytes: &[u8]) -> Result<(&[u8], Header), String> {
    if bytes.len() < MAGIC.len() + 4 || !bytes.starts_with(MAGIC) {
        return Err("the snapshot is not a replay-state snapshot".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err("the snapshot is damaged (checksum mismatch)".into());
    }
    let rest = &body[MAGIC.len()..];
    let nl = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("the snapshot has no header")?;
    let header: Header = serde_json::from_slice(&rest[..nl]).map_err(|e| e.to_string())?;
    Ok((&rest[nl + 1..], header))
}

fn saved_at(bytes: &[u8]) -> Option<i64> {
    parse(bytes).ok().map(|(_, h)| h.saved_at_ms)
}

fn read_u64(r: &mut &[u8]) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Fresh in-process stores, one per app, each sized for its app; an app's Bloom filter gets a
/// random seed of its own.
pub(crate) fn fresh_stores(cfg: &Validated) -> LocalStores {
    use crate::config::NonceMode;
    let mut out = LocalStores::default();
    for id in cfg.apps.iter().map(|a| &a.id) {
        let n = match cfg.raw.state.nonce_mode {
            NonceMode::Bloom => {
                let mut seed = [0u8; 8];
                let _ = getrandom::getrandom(&mut seed);
                LocalNonces::Bloom(Arc::new(BloomNonceStore::new(
                    cfg.filter_for(id),
                    u64::from_le_bytes(seed),
                )))
            }
            NonceMode::Exact => LocalNonces::Exact(Arc::new(ExactNonceStore::new(
                cfg.retention_ms,
                cfg.exact_max_entries_for(id),
            ))),
        };
        out.nonces.push((id.clone(), n));
        out.fingerprints.push((
            id.clone(),
            Arc::new(LocalFingerprintStore::new(
                cfg.fingerprint_max_entries_for(id),
            )),
        ));
    }
    out
}

/// The in-process stores, with what `prior` lets them know: a matching snapshot is read back
/// into them (Bloom filters with their own seeds); otherwise they start empty and [`Found`] says
/// since when they know nothing.
pub(crate) fn build(cfg: &Validated, prior: Prior, now_ms: i64) -> (LocalStores, Found) {
    let stores = fresh_stores(cfg);
    match prior {
        Prior::Fresh => (stores, Found::Fresh),
        Prior::Unknown { since_ms, why } => (stores, Found::Unknown { since_ms, why }),
        Prior::Snapshot(bytes) => match restore(&bytes, cfg, stores.clone(), now_ms) {
            Ok(done) => done,
            Err(why) => (
                stores,
                Found::Unknown {
                    since_ms: saved_at(&bytes).unwrap_or(now_ms).min(now_ms),
                    why,
                },
            ),
        },
    }
}

/// Reads a snapshot into `stores` when it matches the configuration.
fn restore(
    bytes: &[u8],
    cfg: &Validated,
    mut stores: LocalStores,
    now_ms: i64,
) -> Result<(LocalStores, Found), String> {
    let (mut body, h) = parse(bytes)?;
    let apps: Vec<String> = stores.nonces.iter().map(|(a, _)| a.clone()).collect();
    if h.mode != mode_of(&stores) {
        return Err(format!(
            "the snapshot holds {} nonces and this configuration keeps {} nonces",
            h.mode,
            mode_of(&stores)
        ));
    }
    if h.apps != apps {
        return Err(format!(
            "the snapshot's apps ({}) are not this configuration's ({})",
            h.apps.join(", "),
            apps.join(", ")
        ));
    }
    let damaged = |e: std::io::Error| format!("the snapshot is damaged: {e}");
    // Read everything first; put it in place only when all of it matches.
    let mut filters = Vec::new();
    let mut exact = Vec::new();
    for (app, n) in &stores.nonces {
        match n {
            LocalNonces::Bloom(_) => {
                match SlicedBloom::read_from(cfg.filter_for(app), &mut body).map_err(damaged)? {
                    Some(f) => filters.push(f),
                    None => {
                        return Err(format!(
                            "app {app:?}'s nonce filter was sized differently (expected_rps, \
                             target_fp, windows or retention changed)"
                        ))
                    }
                }
            }
            LocalNonces::Exact(_) => {
                let n = read_u64(&mut body).map_err(damaged)?;
                let mut entries = Vec::with_capacity(n.min(1 << 20) as usize);
                for _ in 0..n {
                    let mut l = [0u8; 4];
                    body.read_exact(&mut l).map_err(damaged)?;
                    let mut k = vec![0u8; u32::from_le_bytes(l) as usize];
                    body.read_exact(&mut k).map_err(damaged)?;
                    let exp = read_u64(&mut body).map_err(damaged)? as i64;
                    entries.push((k.into_boxed_slice(), exp));
                }
                exact.push(entries);
            }
        }
    }
    let mut fps = Vec::new();
    for _ in &stores.fingerprints {
        let n = read_u64(&mut body).map_err(damaged)?;
        let mut entries = Vec::with_capacity(n.min(1 << 20) as usize);
        for _ in 0..n {
            let mut b = [0u8; 16];
            body.read_exact(&mut b).map_err(damaged)?;
            let exp = read_u64(&mut body).map_err(damaged)? as i64;
            entries.push((u128::from_le_bytes(b), exp));
        }
        fps.push(entries);
    }
    let (mut filters, mut exact) = (filters.into_iter(), exact.into_iter());
    let mut records = 0;
    for (_, n) in stores.nonces.iter_mut() {
        match n {
            LocalNonces::Bloom(b) => {
                if let Some(f) = filters.next() {
                    *b = Arc::new(BloomNonceStore::from_filter(f));
                    records += 1;
                }
            }
            LocalNonces::Exact(e) => {
                if let Some(entries) = exact.next() {
                    records += e.restore(entries, now_ms);
                }
            }
        }
    }
    for ((_, f), entries) in stores.fingerprints.iter().zip(fps) {
        records += f.restore(entries, now_ms);
    }
    Ok((
        stores,
        Found::Restored {
            saved_at_ms: h.saved_at_ms,
            records,
        },
    ))
}
