-- Per-minute rollup for dashboards and /admin/v1/stats: counts and latency sums by app, route,
-- tier, rule, action, code, country, ISP, device type, rule set version and arm. Fed by the
-- inserts into rampart_decisions (a replayed duplicate batch is counted twice here until it is
-- merged away in the base table; the explorer and exact counts read the base table).
CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.rampart_decisions_minute
ENGINE = SummingMergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm)
AS SELECT
    toStartOfMinute(time) AS minute,
    app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm,
    count() AS decisions,
    sum(latency_us) AS latency_us_sum,
    sum(degraded) AS degraded
FROM {db}.rampart_decisions
GROUP BY minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm
