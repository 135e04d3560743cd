-- The head of each ordering key, kept rather than searched for (issue 35):
-- head = 1 marks the one message the relay may claim next for its key (its
-- lowest pending or parked message; every unordered open message), so the
-- claim reads an index of heads only, however many messages wait behind
-- one key and whatever the planner's statistics say. A finished message
-- (sent or discarded) keeps head = 1 until a relay has moved its key's head
-- on. <table>_keys.head_seq is the key_seq of the key's head (last_seq + 1
-- when nothing is open), read by Enqueue under the key's row lock.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS head smallint NOT NULL DEFAULT 0;

ALTER TABLE {{table}}_keys ADD COLUMN IF NOT EXISTS head_seq bigint NOT NULL DEFAULT 1;

-- Backfill: the lowest open message of each key is its head.
UPDATE {{table}}_keys k SET head_seq = COALESCE(
    (SELECT e.key_seq FROM {{table}} e WHERE e.ordering_key = k.ordering_key AND e.state IN (0, 2) ORDER BY e.key_seq LIMIT 1),
    k.last_seq + 1);

UPDATE {{table}} m SET head = 1 WHERE m.state IN (0, 2) AND (m.ordering_key = ''
    OR m.key_seq = (SELECT k.head_seq FROM {{table}}_keys k WHERE k.ordering_key = m.ordering_key));

-- The claim's scan: pending heads in enqueue order.
CREATE INDEX IF NOT EXISTS {{name}}_claim_idx ON {{table}} (seq) WHERE state = 0 AND head = 1;

-- Finished heads whose key still has to be moved on.
CREATE INDEX IF NOT EXISTS {{name}}_advance_idx ON {{table}} (seq) WHERE head = 1 AND state IN (1, 3);
