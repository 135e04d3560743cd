-- The outbox: one row per enqueued message, written in the business
-- transaction. state: 0 pending, 1 sent, 2 parked, 3 discarded. Times are
-- Unix microseconds from the database clock. key_seq numbers the messages of
-- one ordering key in commit order (0 when there is no ordering key).
-- VARBINARY compares ids and keys byte for byte.
CREATE TABLE IF NOT EXISTS {{table}} (
    seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id           VARBINARY(255)  NOT NULL,
    destination  VARBINARY(255)  NOT NULL,
    ordering_key VARBINARY(255)  NOT NULL,
    key_seq      BIGINT          NOT NULL,
    payload      LONGBLOB        NOT NULL,
    headers      LONGTEXT        NOT NULL,
    state        SMALLINT        NOT NULL DEFAULT 0,
    attempts     INT             NOT NULL DEFAULT 0,
    created_us   BIGINT          NOT NULL,
    next_us      BIGINT          NOT NULL,
    done_us      BIGINT          NULL,
    reason       TEXT            NULL,
    UNIQUE KEY {{name}}_id_idx (id),
    KEY {{name}}_open_idx (state, seq),
    KEY {{name}}_key_idx (ordering_key, state, key_seq),
    KEY {{name}}_done_idx (done_us)
) ENGINE = InnoDB;

-- The last key_seq handed out per ordering key (see the PostgreSQL file).
CREATE TABLE IF NOT EXISTS {{table}}_keys (
    ordering_key VARBINARY(255) NOT NULL PRIMARY KEY,
    last_seq     BIGINT         NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{table}}_lease (
    name     VARBINARY(64)  NOT NULL PRIMARY KEY,
    holder   VARBINARY(255) NOT NULL,
    until_us BIGINT         NOT NULL
) ENGINE = InnoDB;
