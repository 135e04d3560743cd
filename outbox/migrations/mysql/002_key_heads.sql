-- The head of each ordering key, kept rather than searched for: see the
-- PostgreSQL file. MySQL has no partial indexes: {{name}}_claim_idx serves
-- both the claim (state 0, head 1) and the finished heads (states 1 and 3,
-- head 1); the claim names it (FORCE INDEX).
ALTER TABLE {{table}} ADD COLUMN head SMALLINT NOT NULL DEFAULT 0;

ALTER TABLE {{table}}_keys ADD COLUMN head_seq BIGINT NOT NULL DEFAULT 1;

UPDATE {{table}}_keys k SET head_seq = COALESCE(
    (SELECT e.key_seq FROM {{table}} e WHERE e.ordering_key = k.ordering_key AND e.state IN (0, 2) ORDER BY e.key_seq LIMIT 1),
    k.last_seq + 1);

UPDATE {{table}} m JOIN {{table}}_keys k ON k.ordering_key = m.ordering_key
    SET m.head = 1 WHERE m.state IN (0, 2) AND m.key_seq = k.head_seq;

UPDATE {{table}} SET head = 1 WHERE state IN (0, 2) AND ordering_key = '';

CREATE INDEX {{name}}_claim_idx ON {{table}} (state, head, seq);
