-- The outbox: one row per enqueued message, written in the business
-- transaction. state: 0 pending, 1 sent, 2 parked, 3 discarded. Times are
-- Unix microseconds from the database clock. key_seq numbers the messages of
-- one ordering key in commit order (0 when there is no ordering key).
CREATE TABLE IF NOT EXISTS {{table}} (
    seq          bigserial PRIMARY KEY,
    id           text      NOT NULL UNIQUE,
    destination  text      NOT NULL,
    ordering_key text      NOT NULL,
    key_seq      bigint    NOT NULL,
    payload      bytea     NOT NULL,
    headers      text      NOT NULL,
    state        smallint  NOT NULL DEFAULT 0,
    attempts     integer   NOT NULL DEFAULT 0,
    created_us   bigint    NOT NULL,
    next_us      bigint    NOT NULL,
    done_us      bigint,
    reason       text
);

-- The relay's scan: unfinished messages in enqueue order.
CREATE INDEX IF NOT EXISTS {{name}}_open_idx ON {{table}} (seq) WHERE state IN (0, 2);

-- "Is an earlier message with this key still open?"
CREATE INDEX IF NOT EXISTS {{name}}_key_idx ON {{table}} (ordering_key, key_seq) WHERE state IN (0, 2);

-- The sweeper deletes finished rows by age.
CREATE INDEX IF NOT EXISTS {{name}}_done_idx ON {{table}} (done_us);

-- The last key_seq handed out per ordering key. Enqueue updates its row in
-- the business transaction, so two transactions with one key take turns and
-- key_seq follows commit order without gaps.
CREATE TABLE IF NOT EXISTS {{table}}_keys (
    ordering_key text   PRIMARY KEY,
    last_seq     bigint NOT NULL
);

-- The relay lease (used on SQLite only; created everywhere for one schema).
CREATE TABLE IF NOT EXISTS {{table}}_lease (
    name     text   PRIMARY KEY,
    holder   text   NOT NULL,
    until_us bigint NOT NULL
);
