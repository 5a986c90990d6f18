-- The per-minute rollup on a cluster: a materialized view on every shard's local table, into a
-- replicated summing table, and a Distributed table of the same name as on a single server
-- (`rampart_decisions_minute`), which /admin/v1/stats and the dashboards read.
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
(
    minute DateTime,
    app String,
    route String,
    tier String,
    rule String,
    action Enum8('allow' = 1, 'challenge' = 2, 'review' = 3, 'deny' = 4),
    code String,
    country String,
    isp String,
    device_type String,
    ruleset_version String,
    arm String,
    decisions UInt64,
    latency_us_sum UInt64,
    degraded UInt64
)
ENGINE = Distributed({cluster}, {db}, rampart_decisions_minute_local);
