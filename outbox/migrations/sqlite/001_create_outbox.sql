-- The outbox: one row per enqueued message, written in the business
-- transaction. state: 0 pending, 1 sent, 2 parked, 3 discarded. Times are
-- Unix microseconds from the database clock. key_seq numbers the messages of
-- one ordering key in commit order (0 when there is no ordering key).
CREATE TABLE IF NOT EXISTS {{table}} (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
    destination  TEXT    NOT NULL,
    ordering_key TEXT    NOT NULL,
    key_seq      INTEGER NOT NULL,
    payload      BLOB    NOT NULL,
    headers      TEXT    NOT NULL,
    state        INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_us   INTEGER NOT NULL,
    next_us      INTEGER NOT NULL,
    done_us      INTEGER,
    reason       TEXT
);

CREATE INDEX IF NOT EXISTS {{name}}_open_idx ON {{table}} (seq) WHERE state IN (0, 2);

CREATE INDEX IF NOT EXISTS {{name}}_key_idx ON {{table}} (ordering_key, key_seq) WHERE state IN (0, 2);

CREATE INDEX IF NOT EXISTS {{name}}_done_idx ON {{table}} (done_us);

CREATE TABLE IF NOT EXISTS {{table}}_keys (
    ordering_key TEXT    PRIMARY KEY,
    last_seq     INTEGER NOT NULL
);

-- The single-relay lease: SQLite has no SKIP LOCKED, so one relay at a time
-- holds this row and the others wait.
CREATE TABLE IF NOT EXISTS {{table}}_lease (
    name     TEXT    PRIMARY KEY,
    holder   TEXT    NOT NULL,
    until_us INTEGER NOT NULL
);
