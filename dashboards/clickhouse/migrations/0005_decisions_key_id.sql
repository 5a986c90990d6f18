-- The signing key each request's signature matched (contract v1.1 keyrings), so operators see
-- when an old key is no longer used before retiring it. Empty when the signature step refused the
-- request or was not reached.
ALTER TABLE {db}.rampart_decisions ADD COLUMN key_id String DEFAULT ''
