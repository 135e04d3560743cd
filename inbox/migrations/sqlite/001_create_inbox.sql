-- The dedup table: one row per (consumer, message) ever committed, until the
-- sweeper deletes it after the retention window. created_at is Unix
-- milliseconds from the database clock.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer   TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX IF NOT EXISTS {{name}}_created_at_idx ON {{table}} (created_at);
