-- idem records, version 4: the recovery points of operations of steps
-- (package step). A point belongs to the operation of the record whose
-- claim was acquired before its expires_at (the record's expiry when the
-- point was saved or last loaded); a record acquired afresh later, once
-- the old one expired, does not see it. claimed_at and fence are those of
-- the claim that saved it.
CREATE TABLE IF NOT EXISTS {{table}}_steps (
    key_hash   bytea  NOT NULL CHECK (octet_length(key_hash) = 32),
    name       text   NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    result     bytea  NOT NULL,
    fence      bigint NOT NULL,
    claimed_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (key_hash, name)
);

CREATE INDEX IF NOT EXISTS {{table}}_steps_expires_at ON {{table}}_steps (expires_at);
