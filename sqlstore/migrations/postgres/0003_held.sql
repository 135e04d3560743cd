-- idem records, version 3: held marks a completed record (state 2) whose
-- outcome is unknown (Store.Hold): the work may have had its effects and
-- never runs again for the key until an operator resolves it. Until now a
-- held key was told by its result's bytes (Do's outcome-unknown result, or
-- httpidem's stored response with the "outcome unknown" flags); the UPDATE
-- converts the records written that way, once, reading the whole table.
-- Run it when no process of an earlier release writes to the table: such
-- a process would hold keys by their bytes alone, and would not clear the
-- mark when it re-acquires an expired held record.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS held boolean NOT NULL DEFAULT false;
UPDATE {{table}} SET held = true
WHERE state = 2 AND (result = '\x006964656d2f31206f7574636f6d652d756e6b6e6f776e'::bytea
	OR substring(result from 1 for 4) = '\x69680102'::bytea);
