-- idem records, version 1. Times are unix microseconds from the server's
-- UTC_TIMESTAMP(6); key_hash is idem.Key.Digest(), never the raw key.
-- rev counts the writes to a row: every owner-compare UPDATE bumps it, so
-- that a repeated Complete by the owner changes the row and MySQL's
-- rows-affected (which counts changed rows, not matched ones) reports 1.
-- The index is declared inline: MySQL has no CREATE INDEX IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS {{table}} (
    key_hash    BINARY(32) NOT NULL PRIMARY KEY,
    state       TINYINT    NOT NULL, -- 1 in_progress, 2 completed, 3 released
    fingerprint BINARY(32) NOT NULL,
    owner       BINARY(16) NOT NULL,
    fence       BIGINT     NOT NULL,
    result      LONGBLOB   NULL,
    created_at  BIGINT     NOT NULL,
    lease_until BIGINT     NOT NULL, -- 0 unless in_progress
    expires_at  BIGINT     NOT NULL,
    rev         BIGINT     NOT NULL DEFAULT 0,
    INDEX {{table}}_expires_at (expires_at)
) ENGINE = InnoDB;
