-- The dedup table: one row per (consumer, message) ever committed, until the
-- sweeper deletes it after the retention window. VARBINARY compares IDs byte
-- for byte (no collation folds "A" into "a"). created_at is UTC.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer   VARBINARY(255) NOT NULL,
    message_id VARBINARY(255) NOT NULL,
    created_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY {{name}}_created_at_idx (created_at)
) ENGINE = InnoDB;
