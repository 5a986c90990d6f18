-- The rule-visible request of each decision (query, headers without credentials, params, body,
-- device id) as JSON, for backtests of candidate rule sets. Empty when not recorded.
ALTER TABLE {db}.rampart_decisions ADD COLUMN request String DEFAULT ''
