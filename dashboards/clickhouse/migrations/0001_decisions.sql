-- Every decision, one row. Types accepted by ClickHouse 18.16 and by current releases (no
-- DateTime64, Map or LowCardinality). ReplacingMergeTree keyed by decision_id: a batch replayed
-- from the engine's spool after an ambiguous failure collapses into the rows it duplicates
-- (merges do it in the background; `FINAL` or uniqExact(decision_id) count exactly at once).
CREATE TABLE IF NOT EXISTS {db}.rampart_decisions
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
    instance String
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (app, time, decision_id)
