-- The decision log on a ClickHouse cluster (`[decision_log] clickhouse_cluster`): replicated
-- local tables on every shard, a Distributed table in front, created with distributed DDL
-- (ON CLUSTER, through ZooKeeper). `{db}` and `{cluster}` are filled in by `rampart migrate`; the
-- replication paths use the {shard} and {replica} macros of each server's config. The schema
-- is the single-server one after its migrations 0001–0006 (this file creates it whole).

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
