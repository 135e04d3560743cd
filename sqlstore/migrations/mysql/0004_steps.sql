-- idem records, version 4: the recovery points of operations of steps
-- (package step). A point belongs to the operation of the record whose
-- claim was acquired before its expires_at (the record's expiry when the
-- point was saved or last loaded); a record acquired afresh later, once
-- the old one expired, does not see it. claimed_at and fence are those of
-- the claim that saved it; saves counts the saves, so that every save
-- changes the row and reports it.
CREATE TABLE IF NOT EXISTS {{table}}_steps (
    key_hash   BINARY(32)     NOT NULL,
    name       VARBINARY(200) NOT NULL,
    result     LONGBLOB       NOT NULL,
    fence      BIGINT         NOT NULL,
    claimed_at BIGINT         NOT NULL,
    expires_at BIGINT         NOT NULL,
    saves      BIGINT         NOT NULL DEFAULT 1,
    PRIMARY KEY (key_hash, name),
    INDEX {{table}}_steps_expires_at (expires_at)
) ENGINE = InnoDB;
