-- idem records, version 3: held marks a completed record (state 2) whose
-- outcome is unknown (Store.Hold): the work may have had its effects and
-- never runs again for the key until an operator resolves it. Until now a
-- held key was told by its result's bytes (Do's outcome-unknown result, or
-- httpidem's stored response with the "outcome unknown" flags); the UPDATE
-- converts the records written that way, once, reading the whole table.
-- Run it when no process of an earlier release writes to the table: such
-- a process would hold keys by their bytes alone, and would not clear the
-- mark when it re-acquires an expired held record. 0 or 1.
ALTER TABLE {{table}} ADD COLUMN held TINYINT NOT NULL DEFAULT 0;
UPDATE {{table}} SET held = 1, rev = rev + 1
WHERE state = 2 AND (result = X'006964656d2f31206f7574636f6d652d756e6b6e6f776e'
	OR SUBSTRING(result, 1, 4) = X'69680102');
