-- idem records, version 1. Times are unix microseconds from the server's
-- clock_timestamp(); key_hash is idem.Key.Digest(), never the raw key.
CREATE TABLE IF NOT EXISTS {{table}} (
    key_hash    bytea    NOT NULL PRIMARY KEY CHECK (octet_length(key_hash) = 32),
    state       smallint NOT NULL CHECK (state IN (1, 2, 3)), -- 1 in_progress, 2 completed, 3 released
    fingerprint bytea    NOT NULL,
    owner       bytea    NOT NULL,
    fence       bigint   NOT NULL,
    result      bytea,
    created_at  bigint   NOT NULL,
    lease_until bigint   NOT NULL, -- 0 unless in_progress
    expires_at  bigint   NOT NULL
);

CREATE INDEX IF NOT EXISTS {{table}}_expires_at ON {{table}} (expires_at);
