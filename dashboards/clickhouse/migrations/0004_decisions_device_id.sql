-- The client's device id, so clock-skew and abuse investigations can follow one device across
-- apps (the explorer's device_id filter). Empty when the caller sent none.
ALTER TABLE {db}.rampart_decisions ADD COLUMN device_id String DEFAULT ''
