-- idem records, version 1. Times are unix microseconds from
-- unixepoch('subsec') (SQLite ≥ 3.42); key_hash is idem.Key.Digest(), never
-- the raw key.
CREATE TABLE IF NOT EXISTS {{table}} (
    key_hash    BLOB    NOT NULL PRIMARY KEY CHECK (length(key_hash) = 32),
    state       INTEGER NOT NULL CHECK (state IN (1, 2, 3)), -- 1 in_progress, 2 completed, 3 released
    fingerprint BLOB    NOT NULL,
    owner       BLOB    NOT NULL,
    fence       INTEGER NOT NULL,
    result      BLOB,
    created_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL, -- 0 unless in_progress
    expires_at  INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS {{table}}_expires_at ON {{table}} (expires_at);
