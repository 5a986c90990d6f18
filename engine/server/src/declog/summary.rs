//! A bounded summary of the local decision log, for `GET /admin/v1/stats`.
//!
//! The console's overview asks for five breakdowns of the last hour every 5 s. Scanning the
//! files for each would re-read the hour's rows 60 times a minute; ClickHouse answers the same
//! questions from its per-minute rollup (`rampart_decisions_minute`). This is the local log's
//! rollup: per minute, per combination of the dimensions the stats filter and break down by
//! (app, route, tier, rule, action, code, device type, key id, challenge, country, ISP, arm),
//! the number of decisions and a latency histogram. Each query first folds in what the files
//! gained since the last one (it remembers how far it read each file), so a query costs the rows
//! logged since the previous query, not the hour's.
//!
//! **Bounded**: minutes older than [`HORIZON_MS`] are dropped, and so are the oldest minutes
//! whenever the summary holds more than `max_entries` (minute, combination) entries or
//! `max_cells` latency-histogram cells (by default 50,000 and 500,000: at most about 20 MiB
//! whatever the traffic). A query it cannot answer exactly falls back to scanning the files:
//! one that filters on a user, an address or a device id (not summarised), one whose range
//! starts before what the summary still holds, one whose range cuts a minute that has rows on
//! both sides of the cut, or a series bucket that is not a whole number of minutes.
//!
//! **Exact but for latency**: counts, series and breakdowns are what the scan answers.
//! Latency quantiles come from a log-linear histogram: exact below 128 µs, above it the lower
//! bound of a bucket 1/64 wide (at most 1.6% below the scan's value).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

/// The summarised dimensions, in the order of a combination's fields.
pub(crate) const DIMS: [&str; 12] = [
    "app",
    "route",
    "tier",
    "rule",
    "action",
    "code",
    "device_type",
    "key_id",
    "challenge",
    "country",
    "isp",
    "arm",
];
const ACTION: usize = 4;

/// How far back the summary keeps minutes.
pub const HORIZON_MS: i64 = 24 * 3_600_000;
const MINUTE_MS: i64 = 60_000;

type Combo = [Box<str>; DIMS.len()];

/// The decisions of one combination in one minute.
#[derive(Debug, Default)]
struct Agg {
    n: u64,
    /// (bucket, decisions), sorted by bucket.
    latency: Vec<(u16, u32)>,
}

#[derive(Debug)]
struct Minute {
    min_t: i64,
    max_t: i64,
    rows: HashMap<Arc<Combo>, Agg>,
}

/// The summary of one log directory (one engine holds it, behind a lock, beside its writer).
#[derive(Debug)]
pub struct LocalSummary {
    /// Bytes of each file already folded in (whole lines only).
    read: HashMap<PathBuf, u64>,
    minutes: BTreeMap<i64, Minute>,
    /// Every combination held, once (the minutes share them), by the hash of its fields.
    combos: HashMap<u64, Vec<Arc<Combo>>>,
    hasher: std::collections::hash_map::RandomState,
    entries: usize,
    cells: usize,
    max_entries: usize,
    max_cells: usize,
    /// Rows before this time may be missing (dropped minutes or rows past the horizon).
    dropped_before: i64,
}

impl Default for LocalSummary {
    fn default() -> Self {
        Self::new(50_000, 500_000)
    }
}

/// The fields of a logged row the summary reads (the rest is skipped unparsed).
#[derive(Deserialize)]
struct Row<'a> {
    time_ms: i64,
    #[serde(borrow, default)]
    app: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    route: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tier: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    rule: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    action: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    device_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    key_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    challenge: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    country: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    isp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arm: Option<Cow<'a, str>>,
    #[serde(default)]
    latency_us: Option<u64>,
}

fn text<'b>(v: &'b Option<Cow<'_, str>>) -> &'b str {
    v.as_deref().unwrap_or("")
}

impl Row<'_> {
    fn combo(&self) -> [&str; DIMS.len()] {
        [
            text(&self.app),
            text(&self.route),
            text(&self.tier),
            text(&self.rule),
            text(&self.action),
            text(&self.code),
            text(&self.device_type),
            text(&self.key_id),
            text(&self.challenge),
            text(&self.country),
            text(&self.isp),
            text(&self.arm),
        ]
    }
}

/// A latency's histogram bucket: exact below 128 µs, then 64 buckets per power of two.
fn bucket(v: u64) -> u16 {
    if v < 128 {
        return v as u16;
    }
    let e = 63 - v.leading_zeros() as u64; // ≥ 7
    let m = (v >> (e - 6)) & 63;
    (128 + (e - 7) * 64 + m) as u16
}

/// The smallest latency of a bucket.
fn lower(b: u16) -> u64 {
    if b < 128 {
        return b as u64;
    }
    let b = b as u64 - 128;
    let (e, m) = (b / 64 + 7, b % 64);
    (64 + m) << (e - 6)
}

/// The dimensions a stats query filters on, with its wanted value (`None`: any).
pub(crate) type Wanted<'a> = [Option<&'a str>; DIMS.len()];

impl LocalSummary {
    pub fn new(max_entries: usize, max_cells: usize) -> Self {
        LocalSummary {
            read: HashMap::new(),
            minutes: BTreeMap::new(),
            combos: HashMap::new(),
            hasher: Default::default(),
            entries: 0,
            cells: 0,
            max_entries,
            max_cells,
            dropped_before: i64::MIN,
        }
    }

    /// (minute, combination) entries held.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Folds in what the files of `dir` gained since the last call; `files` are the log files,
    /// newest first (as the scan lists them).
    pub(crate) fn refresh(&mut self, files: &[PathBuf], now_ms: i64) {
        let horizon = (now_ms - HORIZON_MS).div_euclid(MINUTE_MS) * MINUTE_MS;
        self.read.retain(|p, _| files.contains(p));
        // Oldest first, so the rows come roughly in time order.
        for (i, file) in files.iter().enumerate().rev() {
            let done = self.read.get(file).copied();
            if done.is_none() {
                // A file seen for the first time whose successor was started before the
                // horizon holds only rows past it: not read at all.
                let next_born = i.checked_sub(1).and_then(|n| born_ms(&files[n]));
                if next_born.is_some_and(|b| b < horizon - super::query::LOCAL_DISORDER_MS) {
                    let len = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                    self.read.insert(file.clone(), len);
                    self.dropped_before = self.dropped_before.max(horizon);
                    continue;
                }
            }
            let from = done.unwrap_or(0);
            let Ok(mut f) = std::fs::File::open(file) else {
                continue;
            };
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len <= from || f.seek(SeekFrom::Start(from)).is_err() {
                continue;
            }
            let mut buf = Vec::with_capacity((len - from) as usize);
            if f.take(len - from).read_to_end(&mut buf).is_err() {
                continue;
            }
            // Whole lines only: a line still being written is read next time.
            let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            for line in buf[..end].split(|&b| b == b'\n') {
                if let Ok(row) = serde_json::from_slice::<Row>(line) {
                    self.add(&row, horizon);
                }
            }
            self.read.insert(file.clone(), from + end as u64 + 1);
        }
        self.evict(horizon);
    }

    fn add(&mut self, row: &Row, horizon: i64) {
        let t = row.time_ms;
        if t < horizon || t < self.dropped_before {
            self.dropped_before = self.dropped_before.max(horizon);
            return;
        }
        let key = self.intern(row.combo());
        let minute = self
            .minutes
            .entry(t.div_euclid(MINUTE_MS))
            .or_insert(Minute {
                min_t: t,
                max_t: t,
                rows: HashMap::new(),
            });
        minute.min_t = minute.min_t.min(t);
        minute.max_t = minute.max_t.max(t);
        let agg = minute.rows.entry(key).or_insert_with(|| {
            self.entries += 1;
            Agg::default()
        });
        agg.n += 1;
        let b = bucket(row.latency_us.unwrap_or(0));
        match agg.latency.binary_search_by_key(&b, |c| c.0) {
            Ok(i) => agg.latency[i].1 += 1,
            Err(i) => {
                agg.latency.insert(i, (b, 1));
                self.cells += 1;
            }
        }
    }

    /// The shared copy of a combination (made on first sight; looked up without allocating).
    fn intern(&mut self, combo: [&str; DIMS.len()]) -> Arc<Combo> {
        let bucket = self.combos.entry(self.hasher.hash_one(combo)).or_default();
        if let Some(c) = bucket
            .iter()
            .find(|c| c.iter().zip(combo).all(|(a, b)| &**a == b))
        {
            return c.clone();
        }
        let c = Arc::new(combo.map(Box::from));
        bucket.push(c.clone());
        c
    }

    /// Drops the minutes past the horizon, then the oldest ones while over a bound.
    fn evict(&mut self, horizon: i64) {
        let mut dropped = false;
        while let Some((&m, _)) = self.minutes.first_key_value() {
            let over = self.entries > self.max_entries || self.cells > self.max_cells;
            if m * MINUTE_MS >= horizon && !over {
                break;
            }
            let gone = self.minutes.remove(&m).expect("first minute");
            self.entries -= gone.rows.len();
            self.cells -= gone.rows.values().map(|a| a.latency.len()).sum::<usize>();
            self.dropped_before = self.dropped_before.max((m + 1) * MINUTE_MS);
            dropped = true;
        }
        if dropped {
            self.combos.retain(|_, v| {
                v.retain(|c| Arc::strong_count(c) > 1);
                !v.is_empty()
            });
        }
    }

    /// The stats of `[from, to)` for rows whose dimensions match `wanted`, broken down by the
    /// dimension `by`, in series buckets of `bucket_ms`: `(series, breakdown, latency)` as the
    /// scan builds them, or `None` when the summary cannot answer exactly.
    pub(crate) fn answer(
        &self,
        from: i64,
        to: i64,
        wanted: &Wanted,
        by: &str,
        bucket_ms: i64,
    ) -> Option<(Vec<Value>, Vec<Value>, Value)> {
        let by = DIMS.iter().position(|d| *d == by)?;
        if from < self.dropped_before || bucket_ms % MINUTE_MS != 0 {
            return None;
        }
        let mut series: BTreeMap<(i64, &str), u64> = BTreeMap::new();
        let mut groups: HashMap<&str, (u64, u64)> = HashMap::new();
        let mut latency: BTreeMap<u16, u64> = BTreeMap::new();
        let first = from.div_euclid(MINUTE_MS);
        let last = (to - 1).div_euclid(MINUTE_MS);
        for (&m, minute) in self.minutes.range(first..=last) {
            if minute.max_t < from || minute.min_t >= to {
                continue;
            }
            if minute.min_t < from || minute.max_t >= to {
                // The range cuts this minute's rows: only the files know which side each is on.
                return None;
            }
            let t = (m * MINUTE_MS).div_euclid(bucket_ms) * bucket_ms;
            for (combo, agg) in &minute.rows {
                if !wanted
                    .iter()
                    .zip(combo.iter())
                    .all(|(w, v)| w.is_none_or(|w| w == &**v))
                {
                    continue;
                }
                *series.entry((t, &combo[ACTION])).or_default() += agg.n;
                let g = groups.entry(&combo[by]).or_default();
                g.0 += agg.n;
                if &*combo[ACTION] != "allow" {
                    g.1 += agg.n;
                }
                for &(b, n) in &agg.latency {
                    *latency.entry(b).or_default() += u64::from(n);
                }
            }
        }
        let total: u64 = latency.values().sum();
        let q = |p: f64| -> Value {
            if total == 0 {
                return json!(0);
            }
            // The rank the scan picks in its sorted list.
            let rank = ((total - 1) as f64 * p).round() as u64;
            let mut seen = 0;
            for (&b, &n) in &latency {
                seen += n;
                if seen > rank {
                    return json!(lower(b));
                }
            }
            json!(0)
        };
        Some((
            super::query::series_rows(series),
            super::query::breakdown_rows(groups),
            json!({ "q": [q(0.5), q(0.9), q(0.99), q(0.999)], "n": total }),
        ))
    }
}

/// When a log file was started, from its name (`decisions-<ms>-<seq>.jsonl`).
fn born_ms(p: &Path) -> Option<i64> {
    p.file_name()?
        .to_str()?
        .strip_prefix("decisions-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_then_within_one_64th() {
        for v in 0..128 {
            assert_eq!(lower(bucket(v)), v);
        }
        let mut prev = 0;
        for v in (128..5_000_000u64)
            .step_by(7)
            .chain([u64::MAX / 2, u64::MAX])
        {
            let (b, lo) = (bucket(v), lower(bucket(v)));
            assert!(b >= prev, "monotone at {v}");
            prev = b;
            assert!(lo <= v && (v - lo) as f64 <= v as f64 / 64.0, "{v}: {lo}");
        }
    }
}
