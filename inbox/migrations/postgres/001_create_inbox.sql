-- The dedup table: one row per (consumer, message) ever committed, until the
-- sweeper deletes it after the retention window.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (consumer, message_id)
);

-- The sweeper deletes by age.
CREATE INDEX IF NOT EXISTS {{name}}_created_at_idx ON {{table}} (created_at);
