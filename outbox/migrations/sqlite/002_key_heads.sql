-- The head of each ordering key, kept rather than searched for: see the
-- PostgreSQL file.
ALTER TABLE {{table}} ADD COLUMN head INTEGER NOT NULL DEFAULT 0;

ALTER TABLE {{table}}_keys ADD COLUMN head_seq INTEGER NOT NULL DEFAULT 1;

UPDATE {{table}}_keys SET head_seq = COALESCE(
    (SELECT e.key_seq FROM {{table}} e WHERE e.ordering_key = {{table}}_keys.ordering_key AND e.state IN (0, 2) ORDER BY e.key_seq LIMIT 1),
    last_seq + 1);

UPDATE {{table}} SET head = 1 WHERE state IN (0, 2) AND (ordering_key = ''
    OR key_seq = (SELECT k.head_seq FROM {{table}}_keys k WHERE k.ordering_key = {{table}}.ordering_key));

CREATE INDEX IF NOT EXISTS {{name}}_claim_idx ON {{table}} (seq) WHERE state = 0 AND head = 1;

CREATE INDEX IF NOT EXISTS {{name}}_advance_idx ON {{table}} (seq) WHERE head = 1 AND state IN (1, 3);
