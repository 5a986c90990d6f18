//! Per-instance state by mistake (threat 3 of docs/security.md). An instance that keeps its
//! anti-replay state in process (`[state] backend = "local"`) is safe only when it is the only
//! one serving its apps: a request replayed on another replica passes there. When the decision
//! log is a shared ClickHouse, the log shows who else serves the same apps, so this instance
//! looks every `[state] peer_check_ms` and says so: the `rampart_local_state_peers` gauge and a
//! warning naming them whenever the set changes. Without a shared log nothing can see the
//! other replicas; the documentation says so.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Backend;
use crate::declog::query::{ch_rows, Sql};
use crate::runtime::Runtime;

/// How far back the log is read: rows older than this do not count as a live peer.
pub const LOOKBACK_S: u32 = 120;

/// Starts the check on a thread of its own when it applies (local state, ClickHouse log, a
/// non-zero interval); does nothing otherwise.
pub fn spawn(rt: &Arc<Runtime>) {
    let cfg = &rt.config.raw;
    if cfg.state.backend != Backend::Local
        || cfg.decision_log.clickhouse_url.is_none()
        || cfg.state.peer_check_ms == 0
    {
        return;
    }
    let rt = rt.clone();
    let spawned = std::thread::Builder::new()
        .name("peer-check".into())
        .spawn(move || {
            let Ok(tokio) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                tracing::warn!("cannot start the peer check");
                return;
            };
            tokio.block_on(run(rt));
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the peer check");
    }
}

/// The query: instances other than this one that logged decisions for its apps lately.
pub fn peer_query(database: &str, me: &str, apps: &[String]) -> Sql {
    let mut q = Sql::new(format!(
        "SELECT instance, count() AS n FROM {database}.{table} \
         WHERE time >= now() - {LOOKBACK_S} AND instance != ",
        table = crate::declog::clickhouse::TABLE,
    ));
    q.bind(me).push(" AND app IN (");
    for (i, app) in apps.iter().enumerate() {
        if i > 0 {
            q.push(", ");
        }
        q.bind(app);
    }
    q.push(") GROUP BY instance ORDER BY instance LIMIT 100");
    q
}

async fn run(rt: Arc<Runtime>) {
    let settings = crate::declog::ch_settings(&rt.config.raw.decision_log);
    let apps: Vec<String> = rt.config.apps.iter().map(|a| a.id.clone()).collect();
    let sql = peer_query(&settings.database, &rt.instance, &apps);
    let every = Duration::from_millis(rt.config.raw.state.peer_check_ms);
    let mut known: Vec<String> = Vec::new();
    while !rt.stopping() {
        match ch_rows(&settings, sql.clone()).await {
            Ok(rows) => {
                let peers: Vec<String> = rows
                    .iter()
                    .filter_map(|r| r["instance"].as_str().map(str::to_string))
                    .collect();
                rt.metrics.local_state_peers.set(peers.len() as i64);
                if peers != known {
                    if peers.is_empty() {
                        tracing::info!("no other instance serves this instance's apps any more");
                    } else {
                        tracing::warn!(
                            peers = %peers.join(", "),
                            "other instances serve the same apps while this one keeps its \
                             anti-replay state in process ([state] backend = \"local\"): a request \
                             replayed on another instance passes there. Use backend = \"redis\" for \
                             more than one instance"
                        );
                    }
                    known = peers;
                }
            }
            // The log being away is reported by the log's own metrics; try again next time.
            Err(e) => tracing::debug!(error = %e, "peer check: decision log unavailable"),
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    /// The SQL the client sends, values bound.
    fn sent(q: &crate::declog::query::Sql) -> String {
        q.query(&clickhouse::Client::default())
            .sql_display()
            .to_string()
    }

    #[test]
    fn the_query_quotes_what_it_is_given() {
        let q = sent(&super::peer_query(
            "db",
            "it's me",
            &["a".into(), "b'c".into()],
        ));
        assert!(q.contains("instance != 'it\\'s me'"), "{q}");
        assert!(q.contains("app IN ('a', 'b\\'c')"), "{q}");
        // A `?` inside a value is the value's own, not a marker.
        let q = sent(&super::peer_query("db", "who?", &["x?y".into()]));
        assert!(q.contains("instance != 'who?'"), "{q}");
        assert!(q.contains("app IN ('x?y') GROUP BY"), "{q}");
    }
}
