-- The decision log on a ClickHouse cluster: replicated local tables on every shard, a Distributed
-- table in front. Replace {db} and {cluster} (a cluster from <remote_servers>); the replication
-- paths use the {shard} and {replica} macros of each server's config. Apply once, on any node, with
-- clickhouse-client, and run the engines with [decision_log] migrate = false.
-- Not exercised by the test suite (one ClickHouse server on the test machines).

CREATE TABLE IF NOT EXISTS {db}.rampart_decisions_local ON CLUSTER {cluster}
(
    time DateTime,
    time_ms UInt64,
    decision_id String,
    app String,
    method String,
    route String,
    user String,
    ip String,
    country String,
    isp String,
    device_type String,
    ua_family String,
    user_agent String,
    ja3 String,
    tier String,
    rule String,
    action Enum8('allow' = 1, 'challenge' = 2, 'review' = 3, 'deny' = 4),
    code String,
    status UInt16,
    score Int32,
    reasons String,
    shadow String,
    ruleset_version String,
    arm String,
    latency_us UInt32,
    degraded UInt8,
    instance String,
    request String DEFAULT '',
    device_id String DEFAULT '',
    key_id String DEFAULT '',
    challenge String DEFAULT ''
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{db}/rampart_decisions', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (app, time, decision_id);

-- Sharded by decision_id, so a replayed batch lands on the shard that holds its first copy and
-- collapses there.
CREATE TABLE IF NOT EXISTS {db}.rampart_decisions ON CLUSTER {cluster}
AS {db}.rampart_decisions_local
ENGINE = Distributed({cluster}, {db}, rampart_decisions_local, cityHash64(decision_id));

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.rampart_decisions_minute_local ON CLUSTER {cluster}
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/{db}/rampart_decisions_minute', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm)
AS SELECT
    toStartOfMinute(time) AS minute,
    app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm,
    count() AS decisions,
    sum(latency_us) AS latency_us_sum,
    sum(degraded) AS degraded
FROM {db}.rampart_decisions_local
GROUP BY minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm;

CREATE TABLE IF NOT EXISTS {db}.rampart_decisions_minute ON CLUSTER {cluster}
AS {db}.rampart_decisions_minute_local
ENGINE = Distributed({cluster}, {db}, rampart_decisions_minute_local, rand());

CREATE TABLE IF NOT EXISTS {db}.rampart_migrations ON CLUSTER {cluster}
(name String, applied DateTime) ENGINE = TinyLog;
