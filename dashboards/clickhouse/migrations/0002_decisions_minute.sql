-- Per-minute rollup for dashboards and /admin/v1/stats: counts and latency sums by app, route,
-- tier, rule, action, code, country, ISP, device type, rule set version and arm. Fed by every
-- insert into rampart_decisions: a batch replayed after an ambiguous insert failure (rare) stays
-- counted twice here even after the base table merges the duplicate away, so the explorer and
-- exact counts read the base table.
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
