-- The per-minute rollup again, its blocks made unique by the decisions they count.
--
-- A replicated table drops an inserted block identical to one of its last 100: that is what
-- makes a resent batch harmless (and 18.16 then skips the views for it, so the rollup does not
-- count it twice). The rollup's blocks from 0002 hold only counts and sums, so two different
-- batches that add up alike in the same minute (same counts, same latency sum) made the second
-- one vanish from the rollup, in healthy operation. Each row now carries `ids_digest`, the sum of
-- its decisions' `cityHash64(decision_id)` (wrapping), so blocks are alike only when they count
-- the same decisions. Summing leaves `ids_digest` out (the third engine argument): it only tells
-- blocks apart.
--
-- The view is created anew (18.16 cannot change a view's query), under a new replication path so
-- that no replica meets the old table's metadata. On a cluster created before this migration the
-- rollup starts empty; the decisions are untouched (rebuild the rollup from
-- `rampart_decisions_local FINAL` on each shard if its history matters).
DROP TABLE IF EXISTS {db}.rampart_decisions_minute_local ON CLUSTER {cluster};

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.rampart_decisions_minute_local ON CLUSTER {cluster}
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/{db}/rampart_decisions_minute_v2', '{replica}', (decisions, latency_us_sum, degraded))
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm)
AS SELECT
    toStartOfMinute(time) AS minute,
    app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm,
    count() AS decisions,
    sum(latency_us) AS latency_us_sum,
    sum(degraded) AS degraded,
    sum(cityHash64(decision_id)) AS ids_digest
FROM {db}.rampart_decisions_local
GROUP BY minute, app, route, tier, rule, action, code, country, isp, device_type, ruleset_version, arm;
