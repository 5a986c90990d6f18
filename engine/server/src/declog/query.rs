//! Reading the decision log back for the console: `GET /admin/v1/decisions` (filters, keyset
//! pagination) and `GET /admin/v1/stats` (time series, breakdowns, latency percentiles). Answered
//! from ClickHouse when `[decision_log] clickhouse_url` is set, else by scanning the local log's
//! files (newest first, bounded) — the same JSON either way.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::declog::clickhouse::{ChSettings, TABLE};

/// Query-string filters of `/admin/v1/decisions` and `/admin/v1/stats`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Unix ms, inclusive; default: the start of the minute 1 hour before `to`.
    pub from: Option<i64>,
    /// Unix ms, exclusive; default: now.
    pub to: Option<i64>,
    pub app: Option<String>,
    pub route: Option<String>,
    pub user: Option<String>,
    pub ip: Option<String>,
    pub tier: Option<String>,
    pub rule: Option<String>,
    pub action: Option<String>,
    pub code: Option<String>,
    /// The client's device type (`ios`, `android`, `web`, … as callers send it).
    pub device_type: Option<String>,
    /// The client's device id.
    pub device_id: Option<String>,
    /// The signing key the request's signature matched.
    pub key_id: Option<String>,
    /// Where the request stood with challenges: `issued`, `solved`, `cleared`.
    pub challenge: Option<String>,
    /// Page size, 1–1000 (default 100).
    pub limit: Option<usize>,
    /// `next` of the previous page.
    pub cursor: Option<String>,
    /// Stats: breakdown dimension (`country`, `isp`, `device_type`, `tier`, `rule`, `code`,
    /// `route`, `app`, `arm`, `key_id`, `challenge`); default `tier`.
    pub by: Option<String>,
    /// Stats: time-series bucket in seconds (60 – 86400, default 60).
    pub bucket_s: Option<u32>,
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Invalid(String),
    #[error("decision log unavailable: {0}")]
    Unavailable(String),
}

pub const DIMENSIONS: [&str; 11] = [
    "country",
    "isp",
    "device_type",
    "tier",
    "rule",
    "code",
    "route",
    "app",
    "arm",
    "key_id",
    "challenge",
];

const ACTIONS: [&str; 4] = ["allow", "challenge", "review", "deny"];

/// The checked parameters.
#[derive(Debug, Clone)]
struct Checked {
    from: i64,
    to: i64,
    limit: usize,
    cursor: Option<(i64, String)>,
    by: &'static str,
    bucket_s: u32,
}

fn check(f: &Filter, now_ms: i64) -> Result<Checked, QueryError> {
    let to = f.to.unwrap_or(now_ms + 1);
    // By default the hour before `to`, from the start of its first minute (so the local log's
    // per-minute summary and ClickHouse's rollup answer it whole).
    let from = f
        .from
        .unwrap_or_else(|| (to - 3_600_000).div_euclid(60_000) * 60_000);
    if from < 0 || to <= from {
        return Err(QueryError::Invalid(
            "from must be ≥ 0 and before to (Unix ms)".into(),
        ));
    }
    let limit = f.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(QueryError::Invalid("limit must be 1–1000".into()));
    }
    if let Some(a) = &f.action {
        if !ACTIONS.contains(&a.as_str()) {
            return Err(QueryError::Invalid(format!(
                "action must be one of {}",
                ACTIONS.join(", ")
            )));
        }
    }
    let cursor = match &f.cursor {
        None => None,
        Some(c) => {
            let (t, id) = c
                .split_once(':')
                .ok_or_else(|| QueryError::Invalid("cursor is malformed".into()))?;
            let t: i64 = t
                .parse()
                .map_err(|_| QueryError::Invalid("cursor is malformed".into()))?;
            Some((t, id.to_string()))
        }
    };
    let by = match &f.by {
        None => "tier",
        Some(b) => DIMENSIONS
            .iter()
            .find(|d| **d == b.as_str())
            .copied()
            .ok_or_else(|| {
                QueryError::Invalid(format!("by must be one of {}", DIMENSIONS.join(", ")))
            })?,
    };
    let bucket_s = f.bucket_s.unwrap_or(60);
    if !(60..=86_400).contains(&bucket_s) {
        return Err(QueryError::Invalid("bucket_s must be 60–86400".into()));
    }
    Ok(Checked {
        from,
        to,
        limit,
        cursor,
        by,
        bucket_s,
    })
}

fn string_filters(f: &Filter) -> [(&'static str, Option<&String>); 12] {
    [
        ("app", f.app.as_ref()),
        ("route", f.route.as_ref()),
        ("user", f.user.as_ref()),
        ("ip", f.ip.as_ref()),
        ("tier", f.tier.as_ref()),
        ("rule", f.rule.as_ref()),
        ("action", f.action.as_ref()),
        ("code", f.code.as_ref()),
        ("device_type", f.device_type.as_ref()),
        ("device_id", f.device_id.as_ref()),
        ("key_id", f.key_id.as_ref()),
        ("challenge", f.challenge.as_ref()),
    ]
}

fn next_cursor(rows: &[Value], limit: usize) -> Value {
    if rows.len() < limit {
        return Value::Null;
    }
    rows.last()
        .map(|r| {
            Value::String(format!(
                "{}:{}",
                r["time_ms"].as_i64().unwrap_or(0),
                r["decision_id"].as_str().unwrap_or("")
            ))
        })
        .unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------------------------
// ClickHouse

/// A ClickHouse query: SQL text with a `?` for each value, and the values, in order. The text
/// holds only our own SQL (names, numbers); every caller-supplied string is bound, and the
/// `clickhouse` crate quotes and escapes it (client-side binding: ClickHouse 18.16 has no
/// server-side query parameters).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sql {
    text: String,
    args: Vec<String>,
}

impl Sql {
    pub(crate) fn new(text: impl Into<String>) -> Sql {
        Sql {
            text: text.into(),
            args: Vec::new(),
        }
    }

    /// Appends SQL text (never a value: the client would read a `?` in it as a marker).
    pub(crate) fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends a marker bound to `value`.
    pub(crate) fn bind(&mut self, value: &str) -> &mut Sql {
        self.text.push('?');
        self.args.push(value.to_string());
        self
    }

    /// Appends another query, its values after this one's.
    pub(crate) fn append(&mut self, other: &Sql) -> &mut Sql {
        self.text.push_str(&other.text);
        self.args.extend(other.args.iter().cloned());
        self
    }

    /// The client's query, every value bound.
    pub(crate) fn query(&self, client: &clickhouse::Client) -> clickhouse::query::Query {
        self.args
            .iter()
            .fold(client.query(&self.text), |q, a| q.bind(a.as_str()))
    }
}

/// `AND col = ?` for each string filter given.
fn bind_filters(w: &mut Sql, f: &Filter) {
    for (col, v) in string_filters(f) {
        if let Some(v) = v {
            w.push(&format!(" AND {col} = ")).bind(v);
        }
    }
}

fn ch_where(f: &Filter, c: &Checked) -> Sql {
    let mut w = Sql::new(format!(
        "time >= toDateTime({}) AND time <= toDateTime({}) AND time_ms >= {} AND time_ms < {}",
        c.from / 1000,
        c.to / 1000 + 1,
        c.from,
        c.to
    ));
    bind_filters(&mut w, f);
    w
}

pub(crate) async fn ch_rows(s: &ChSettings, sql: Sql) -> Result<Vec<Value>, QueryError> {
    let client = crate::declog::clickhouse::client(s);
    let run = async {
        let mut cursor = sql
            .query(&client)
            .fetch_bytes("JSONEachRow")
            .map_err(|e| e.to_string())?;
        cursor.collect().await.map_err(|e| e.to_string())
    };
    let bytes = tokio::time::timeout(s.timeout, run)
        .await
        .map_err(|_| QueryError::Unavailable("clickhouse did not answer in time".into()))?
        .map_err(QueryError::Unavailable)?;
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).map_err(|e| QueryError::Unavailable(e.to_string())))
        .collect()
}

/// A ClickHouse row as the API's decision object (JSON columns parsed, flags as booleans).
/// A recorded request column: its JSON, or `null` when none was recorded.
fn recorded(s: &str) -> Value {
    if s.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(s).unwrap_or(Value::Null)
    }
}

fn ch_decision(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["reasons", "shadow"] {
            if let Some(Value::String(s)) = o.get(k) {
                let parsed = serde_json::from_str(s).unwrap_or(Value::Array(vec![]));
                o.insert(k.into(), parsed);
            }
        }
        for k in ["time_ms", "score", "latency_us", "status"] {
            if let Some(Value::String(s)) = o.get(k) {
                let n: i64 = s.parse().unwrap_or(0);
                o.insert(k.into(), n.into());
            }
        }
        if let Some(Value::String(s)) = o.get("request") {
            let parsed = recorded(s);
            o.insert("request".into(), parsed);
        }
        let degraded = o.get("degraded").and_then(Value::as_u64).unwrap_or(0) == 1;
        o.insert("degraded".into(), degraded.into());
        o.remove("time");
    }
    v
}

pub async fn decisions_ch(s: &ChSettings, f: &Filter, now_ms: i64) -> Result<Value, QueryError> {
    let c = check(f, now_ms)?;
    let mut sql = Sql::new(format!(
        "SELECT * FROM {db}.{TABLE} WHERE ",
        db = s.database
    ));
    sql.append(&ch_where(f, &c));
    if let Some((t, id)) = &c.cursor {
        sql.push(&format!(
            " AND (time_ms < {t} OR (time_ms = {t} AND decision_id < "
        ))
        .bind(id)
        .push("))");
    }
    sql.push(&format!(
        " ORDER BY time_ms DESC, decision_id DESC LIMIT 1 BY decision_id LIMIT {limit}",
        limit = c.limit
    ));
    let rows: Vec<Value> = ch_rows(s, sql)
        .await?
        .into_iter()
        .map(ch_decision)
        .collect();
    let next = next_cursor(&rows, c.limit);
    Ok(json!({ "decisions": rows, "next": next, "source": "clickhouse" }))
}

pub async fn stats_ch(s: &ChSettings, f: &Filter, now_ms: i64) -> Result<Value, QueryError> {
    let c = check(f, now_ms)?;
    let db = &s.database;
    // The rollup has no user, ip, device id or key id: filters on them (and a breakdown by key)
    // read the base table.
    let base = f.user.is_some()
        || f.ip.is_some()
        || f.device_id.is_some()
        || f.key_id.is_some()
        || f.challenge.is_some()
        || c.by == "key_id"
        || c.by == "challenge";
    let (table, n, time) = if base {
        (format!("{db}.{TABLE}"), "count()", "time")
    } else {
        (
            format!("{db}.rampart_decisions_minute"),
            "sum(decisions)",
            "minute",
        )
    };
    let mut w = Sql::new(format!(
        "{time} >= toDateTime({}) AND {time} < toDateTime({})",
        c.from / 1000,
        (c.to + 999) / 1000
    ));
    bind_filters(&mut w, f);
    let b = c.bucket_s;
    let mut series = Sql::new(format!(
        "SELECT intDiv(toUInt32({time}), {b}) * {b} * 1000 AS t, toString(action) AS action, \
         {n} AS n FROM {table} WHERE "
    ));
    series
        .append(&w)
        .push(" GROUP BY t, action ORDER BY t, action");
    let series = ch_rows(s, series).await?;
    let by = c.by;
    let mut breakdown = Sql::new(format!(
        "SELECT toString({by}) AS key, {n} AS n, {nr} AS refused FROM {table} WHERE ",
        nr = if base {
            "countIf(action != 'allow')"
        } else {
            "sumIf(decisions, action != 'allow')"
        }
    ));
    breakdown
        .append(&w)
        .push(" GROUP BY key ORDER BY n DESC LIMIT 100");
    let breakdown = ch_rows(s, breakdown).await?;
    let mut latency = Sql::new(format!(
        "SELECT quantiles(0.5, 0.9, 0.99, 0.999)(latency_us) AS q, count() AS n \
         FROM {db}.{TABLE} WHERE "
    ));
    latency.append(&ch_where(f, &c));
    let latency = ch_rows(s, latency).await?;
    Ok(stats_json(
        &c,
        series,
        breakdown,
        latency.into_iter().next().unwrap_or(Value::Null),
        "clickhouse",
    ))
}

fn num(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0.0)
}

fn stats_json(
    c: &Checked,
    series: Vec<Value>,
    breakdown: Vec<Value>,
    latency: Value,
    source: &str,
) -> Value {
    let series: Vec<Value> = series
        .into_iter()
        .map(|r| json!({ "t": num(&r["t"]) as i64, "action": r["action"], "n": num(&r["n"]) as u64 }))
        .collect();
    let breakdown: Vec<Value> = breakdown
        .into_iter()
        .map(|r| {
            let n = num(&r["n"]);
            let refused = num(&r["refused"]);
            json!({
                "key": r["key"],
                "n": n as u64,
                "refused": refused as u64,
                "refused_ratio": if n > 0.0 { refused / n } else { 0.0 },
            })
        })
        .collect();
    let q: Vec<f64> = latency["q"]
        .as_array()
        .map(|a| a.iter().map(num).collect())
        .unwrap_or_default();
    let pick = |i: usize| q.get(i).copied().unwrap_or(0.0);
    json!({
        "from": c.from,
        "to": c.to,
        "bucket_s": c.bucket_s,
        "series": series,
        "by": c.by,
        "breakdown": breakdown,
        "latency_us": {
            "p50": pick(0), "p90": pick(1), "p99": pick(2), "p999": pick(3),
            "n": num(&latency["n"]) as u64,
        },
        "source": source,
    })
}

// ---------------------------------------------------------------------------------------------
// Local log

/// Most rows a local query reads (newest files first).
const LOCAL_SCAN: usize = 2_000_000;

fn local_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("decisions-") && n.ends_with(".jsonl"))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.reverse();
    files
}

/// A local-log record as the API's decision object (the ClickHouse row's fields).
fn local_decision(r: &Value) -> Value {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    json!({
        "time_ms": r["time_ms"],
        "decision_id": s("decision_id"),
        "app": s("app"),
        "method": s("method"),
        "route": s("route"),
        "user": s("user"),
        "ip": s("ip"),
        "country": s("country"),
        "isp": s("isp"),
        "device_type": s("device_type"),
        "device_id": s("device_id"),
        "key_id": s("key_id"),
        "challenge": s("challenge"),
        "ua_family": crate::declog::clickhouse::ua_family(&s("user_agent")),
        "user_agent": s("user_agent"),
        "ja3": s("ja3"),
        "tier": s("tier"),
        "rule": s("rule"),
        "action": s("action"),
        "code": s("code"),
        "status": r["status"],
        "score": r.get("score").cloned().unwrap_or(json!(0)),
        "reasons": r.get("reasons").cloned().unwrap_or(json!([])),
        "shadow": r.get("shadow").cloned().unwrap_or(json!([])),
        "ruleset_version": s("ruleset_version"),
        "arm": s("arm"),
        "latency_us": r["latency_us"],
        "degraded": r.get("degraded").and_then(Value::as_bool).unwrap_or(false),
        "instance": s("instance"),
        // An object since the log sets it in as it is; JSON text in a string in older files.
        "request": match r.get("request") {
            Some(Value::String(text)) => recorded(text),
            Some(o @ Value::Object(_)) => o.clone(),
            _ => Value::Null,
        },
    })
}

/// Every local record in the range that passes the filters, newest first, until `visit` says stop.
fn scan_local(dir: &Path, f: &Filter, c: &Checked, mut visit: impl FnMut(Value) -> bool) {
    let mut read = 0usize;
    for file in local_files(dir) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines().rev() {
            read += 1;
            if read > LOCAL_SCAN {
                return;
            }
            let Ok(r) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let d = local_decision(&r);
            let t = d["time_ms"].as_i64().unwrap_or(0);
            if t < c.from || t >= c.to {
                continue;
            }
            if let Some((ct, cid)) = &c.cursor {
                let id = d["decision_id"].as_str().unwrap_or("");
                if t > *ct || (t == *ct && id >= cid.as_str()) {
                    continue;
                }
            }
            let pass = string_filters(f)
                .iter()
                .all(|(k, v)| v.is_none_or(|v| d[*k].as_str() == Some(v.as_str())));
            if pass && !visit(d) {
                return;
            }
        }
    }
}

/// Rows of a local log file are appended in batches, roughly in time order: a row can be older
/// than one written before it by at most about this much.
pub(super) const LOCAL_DISORDER_MS: i64 = 5_000;

pub fn decisions_local(dir: &Path, f: &Filter, now_ms: i64) -> Result<Value, QueryError> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let c = check(f, now_ms)?;
    // The newest `limit` rows by (time_ms, decision_id): a min-heap of the best so far. The scan
    // stops once it reads rows older than the heap's oldest by more than the files' disorder.
    let mut best: BinaryHeap<Reverse<(i64, String, usize)>> = BinaryHeap::new();
    let mut rows: std::collections::HashMap<usize, Value> = Default::default();
    let mut seq = 0usize;
    scan_local(dir, f, &c, |d| {
        let key = (
            d["time_ms"].as_i64().unwrap_or(0),
            d["decision_id"].as_str().unwrap_or("").to_string(),
        );
        if best.len() == c.limit {
            let oldest = &best.peek().expect("full heap").0;
            if key.0 < oldest.0 - LOCAL_DISORDER_MS {
                return false;
            }
            if (key.0, &key.1) <= (oldest.0, &oldest.1) {
                return true;
            }
            if let Some(Reverse((_, _, gone))) = best.pop() {
                rows.remove(&gone);
            }
        }
        seq += 1;
        best.push(Reverse((key.0, key.1, seq)));
        rows.insert(seq, d);
        true
    });
    let mut keep: Vec<(i64, String, usize)> = best.into_iter().map(|Reverse(k)| k).collect();
    keep.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    let rows: Vec<Value> = keep
        .into_iter()
        .filter_map(|(_, _, i)| rows.remove(&i))
        .collect();
    let next = next_cursor(&rows, c.limit);
    Ok(json!({ "decisions": rows, "next": next, "source": "local" }))
}

/// The stats of the local log: from the summary when it can answer (see
/// [`crate::declog::summary`]), else by scanning the files.
pub fn stats_local(
    dir: &Path,
    f: &Filter,
    now_ms: i64,
    summary: Option<&std::sync::Mutex<super::summary::LocalSummary>>,
) -> Result<Value, QueryError> {
    let c = check(f, now_ms)?;
    if let Some(summary) = summary {
        if f.user.is_none() && f.ip.is_none() && f.device_id.is_none() {
            let mut wanted: super::summary::Wanted = Default::default();
            for (k, v) in string_filters(f) {
                if let Some(i) = super::summary::DIMS.iter().position(|d| *d == k) {
                    wanted[i] = v.map(String::as_str);
                }
            }
            let mut s = summary.lock().unwrap_or_else(|e| e.into_inner());
            s.refresh(&local_files(dir), now_ms);
            if let Some((series, breakdown, latency)) =
                s.answer(c.from, c.to, &wanted, c.by, c.bucket_s as i64 * 1000)
            {
                return Ok(stats_json(&c, series, breakdown, latency, "local"));
            }
        }
    }
    stats_scan(dir, f, &c)
}

/// The stats of the local log, from a scan of its files.
fn stats_scan(dir: &Path, f: &Filter, c: &Checked) -> Result<Value, QueryError> {
    let c = c.clone();
    let bucket_ms = c.bucket_s as i64 * 1000;
    let mut series: std::collections::BTreeMap<(i64, String), u64> = Default::default();
    let mut groups: std::collections::HashMap<String, (u64, u64)> = Default::default();
    let mut lat: Vec<u64> = Vec::new();
    scan_local(dir, f, &c, |d| {
        let t = d["time_ms"].as_i64().unwrap_or(0);
        let action = d["action"].as_str().unwrap_or("").to_string();
        *series
            .entry(((t / bucket_ms) * bucket_ms, action.clone()))
            .or_default() += 1;
        let key = match &d[c.by] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let g = groups.entry(key).or_default();
        g.0 += 1;
        g.1 += u64::from(action != "allow");
        lat.push(d["latency_us"].as_u64().unwrap_or(0));
        true
    });
    lat.sort_unstable();
    let q = |p: f64| -> Value {
        if lat.is_empty() {
            return json!(0);
        }
        json!(lat[((lat.len() - 1) as f64 * p).round() as usize])
    };
    Ok(stats_json(
        &c,
        series_rows(series),
        breakdown_rows(groups),
        json!({ "q": [q(0.5), q(0.9), q(0.99), q(0.999)], "n": lat.len() }),
        "local",
    ))
}

/// Local stats' series rows from counts by (bucket start, action).
pub(super) fn series_rows<A: serde::Serialize>(
    series: impl IntoIterator<Item = ((i64, A), u64)>,
) -> Vec<Value> {
    series
        .into_iter()
        .map(|((t, a), n)| json!({ "t": t, "action": a, "n": n }))
        .collect()
}

/// Local stats' breakdown rows from (decisions, refused) by key: largest first, 100 at most.
pub(super) fn breakdown_rows<K: Ord + serde::Serialize>(
    groups: impl IntoIterator<Item = (K, (u64, u64))>,
) -> Vec<Value> {
    let mut rows: Vec<(K, (u64, u64))> = groups.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    rows.truncate(100);
    rows.into_iter()
        .map(|(k, (n, r))| json!({ "key": k, "n": n, "refused": r }))
        .collect()
}

/// The filter of every decision in `[from, to)`, checked.
fn range(from: i64, to: i64) -> Result<(Filter, Checked), QueryError> {
    let f = Filter {
        from: Some(from),
        to: Some(to),
        ..Filter::default()
    };
    let c = check(&f, to)?;
    Ok((f, c))
}

/// Every decision in `[from, to)`, oldest first, at most `max` (the newest are dropped beyond
/// it); for backtests. Returns the rows and whether `max` cut them.
pub async fn recorded_ch(
    s: &ChSettings,
    from: i64,
    to: i64,
    max: usize,
) -> Result<(Vec<Value>, bool), QueryError> {
    let (f, c) = range(from, to)?;
    let mut sql = Sql::new(format!(
        "SELECT * FROM {db}.{TABLE} WHERE ",
        db = s.database
    ));
    sql.append(&ch_where(&f, &c)).push(&format!(
        " ORDER BY time_ms, decision_id LIMIT 1 BY decision_id LIMIT {limit}",
        limit = max + 1
    ));
    let mut rows: Vec<Value> = ch_rows(s, sql)
        .await?
        .into_iter()
        .map(ch_decision)
        .collect();
    let cut = rows.len() > max;
    rows.truncate(max);
    Ok((rows, cut))
}

/// As [`recorded_ch`], from the local log.
pub fn recorded_local(
    dir: &Path,
    from: i64,
    to: i64,
    max: usize,
) -> Result<(Vec<Value>, bool), QueryError> {
    let (f, c) = range(from, to)?;
    let mut rows = Vec::new();
    let mut seen = std::collections::HashSet::new();
    scan_local(dir, &f, &c, |d| {
        let id = d["decision_id"].as_str().unwrap_or("").to_string();
        if seen.insert(id) {
            rows.push(d);
        }
        true
    });
    rows.sort_by(|a, b| {
        (a["time_ms"].as_i64(), a["decision_id"].as_str())
            .cmp(&(b["time_ms"].as_i64(), b["decision_id"].as_str()))
    });
    let cut = rows.len() > max;
    rows.truncate(max);
    Ok((rows, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(q: &Sql) -> String {
        q.query(&clickhouse::Client::default())
            .sql_display()
            .to_string()
    }

    #[test]
    fn filter_values_are_bound_and_escaped_by_the_client() {
        let f = Filter {
            from: Some(1_000),
            to: Some(5_000),
            user: Some("o'brien\\ ?x".into()),
            code: Some("a\nb".into()),
            cursor: Some("4000:id'1".into()),
            ..Filter::default()
        };
        let c = check(&f, 10_000).unwrap();
        let w = sent(&ch_where(&f, &c));
        assert_eq!(
            w,
            "time >= toDateTime(1) AND time <= toDateTime(6) AND time_ms >= 1000 AND \
             time_ms < 5000 AND user = 'o\\'brien\\\\ ?x' AND code = 'a\\\nb'"
        );
        // Markers are filled in order, the cursor's id after the filters.
        let mut q = Sql::new("SELECT 1 WHERE ");
        q.append(&ch_where(&f, &c))
            .push(" AND decision_id < ")
            .bind(&c.cursor.as_ref().unwrap().1);
        assert!(
            sent(&q).ends_with("code = 'a\\\nb' AND decision_id < 'id\\'1'"),
            "{}",
            sent(&q)
        );
    }

    /// Log rows as the writer writes them, from a seeded generator: times over the three hours
    /// before `now`, a few values per dimension (some absent), latencies 1 µs – 20 ms.
    fn rows(seed: u64, n: usize, now: i64) -> Vec<String> {
        let mut x = seed | 1;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let pick = |v: &[&str], i: u64| -> Value {
            match v[i as usize % v.len()] {
                "-" => Value::Null,
                s => json!(s),
            }
        };
        (0..n)
            .map(|i| {
                let r = json!({
                    "time_ms": now - next(3 * 3_600_000) as i64,
                    "decision_id": format!("d{seed}-{i:06}"),
                    "app": pick(&["shop", "pay", "ops"], next(3)),
                    "method": "POST",
                    "route": pick(&["/api/a", "/api/b", "/login"], next(3)),
                    "user": format!("u{}", next(50)),
                    "ip": "203.0.113.9",
                    "country": pick(&["DE", "CN", "-", "BR"], next(4)),
                    "isp": pick(&["isp-a", "isp-b"], next(2)),
                    "device_type": pick(&["ios", "web", "-"], next(3)),
                    "tier": pick(&["edge", "gateway", "business", "-"], next(4)),
                    "rule": pick(&["r1", "r2", "-"], next(3)),
                    "action": pick(&["allow", "allow", "deny", "challenge", "review"], next(5)),
                    "code": pick(&["OK", "RULE_DENY", "RATE_LIMITED"], next(3)),
                    "key_id": pick(&["k1", "k2"], next(2)),
                    "challenge": pick(&["", "issued", "solved"], next(3)),
                    "arm": pick(&["stable", "canary"], next(2)),
                    "status": 200,
                    "latency_us": 1 + next(20_000),
                });
                r.to_string()
            })
            .collect()
    }

    fn append(path: &Path, rows: &[String]) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        for r in rows {
            writeln!(f, "{r}").unwrap();
        }
    }

    /// What the summary answers equals what the scan answers (latency within a 64th, never
    /// above), for filters and breakdowns over whole minutes, as the files grow and rotate.
    #[test]
    fn the_local_summary_answers_what_the_scan_answers() {
        let dir = std::env::temp_dir().join(format!("rampart-summary-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let now = 1_796_103_612_345;
        let first = dir.join(format!(
            "decisions-{:013}-000001.jsonl",
            now - 4 * 3_600_000
        ));
        append(&first, &rows(7, 3000, now));
        let summary = std::sync::Mutex::new(super::super::summary::LocalSummary::default());
        let hour_ago = (now - 3_600_000) / 60_000 * 60_000;
        let queries: Vec<Filter> = vec![
            Filter::default(),
            Filter {
                by: Some("country".into()),
                ..Filter::default()
            },
            Filter {
                by: Some("rule".into()),
                from: Some(0),
                ..Filter::default()
            },
            Filter {
                by: Some("code".into()),
                app: Some("shop".into()),
                action: Some("deny".into()),
                from: Some(hour_ago - 3_600_000),
                to: Some(hour_ago),
                bucket_s: Some(300),
                ..Filter::default()
            },
            Filter {
                by: Some("challenge".into()),
                tier: Some("edge".into()),
                ..Filter::default()
            },
            Filter {
                by: Some("isp".into()),
                route: Some("/login".into()),
                key_id: Some("k2".into()),
                ..Filter::default()
            },
        ];
        let same = |round: &str, summary: &std::sync::Mutex<_>| {
            for f in &queries {
                let c = check(f, now).unwrap();
                let fast = stats_local(&dir, f, now, Some(summary)).unwrap();
                let scan = stats_scan(&dir, f, &c).unwrap();
                assert_eq!(fast["series"], scan["series"], "{round} {f:?}");
                assert_eq!(fast["breakdown"], scan["breakdown"], "{round} {f:?}");
                assert_eq!(fast["latency_us"]["n"], scan["latency_us"]["n"]);
                for p in ["p50", "p90", "p99", "p999"] {
                    let (a, b) = (
                        fast["latency_us"][p].as_f64().unwrap(),
                        scan["latency_us"][p].as_f64().unwrap(),
                    );
                    assert!(a <= b && b - a <= b / 64.0, "{round} {p}: {a} vs {b}");
                }
                assert!(scan["latency_us"]["n"].as_u64().unwrap() > 0, "{f:?}");
            }
        };
        same("first", &summary);
        // The current file grows, a new one is started: only the new rows are read.
        append(&first, &rows(8, 500, now));
        let second = dir.join(format!("decisions-{:013}-000002.jsonl", now - 60_000));
        append(&second, &rows(9, 800, now));
        same("grown", &summary);
        let held = summary.lock().unwrap().entries();
        same("again", &summary);
        assert_eq!(
            summary.lock().unwrap().entries(),
            held,
            "nothing read twice"
        );
        // A line still being written is left for the next call.
        std::fs::write(
            &second,
            [
                std::fs::read(&second).unwrap(),
                b"{\"time_ms\": 17".to_vec(),
            ]
            .concat(),
        )
        .unwrap();
        same("partial", &summary);

        // The summary says when it cannot answer: a range that cuts a minute's rows, a bucket
        // that is not whole minutes, rows it dropped.
        let s = summary.lock().unwrap();
        let any: super::super::summary::Wanted = Default::default();
        assert!(s
            .answer(hour_ago + 30_000, now + 1, &any, "tier", 60_000)
            .is_none());
        assert!(s.answer(hour_ago, now + 1, &any, "tier", 90_000).is_none());
        assert!(s.answer(hour_ago, now + 1, &any, "user", 60_000).is_none());
        assert!(s.answer(hour_ago, now + 1, &any, "tier", 60_000).is_some());
        drop(s);

        // Bounded: a small summary keeps the newest minutes, and a query before them scans.
        let small = std::sync::Mutex::new(super::super::summary::LocalSummary::new(300, 100_000));
        same("small", &small);
        let s = small.lock().unwrap();
        assert!(s.entries() <= 300, "{}", s.entries());
        assert!(s.answer(0, now + 1, &any, "tier", 60_000).is_none());
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
