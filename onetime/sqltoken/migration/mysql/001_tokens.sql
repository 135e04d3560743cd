-- One row per issued token. Only SHA-256 digests are stored; times are unix
-- microseconds by the database's clock.
CREATE TABLE IF NOT EXISTS {{table}} (
	token_hash BINARY(32) NOT NULL PRIMARY KEY,
	scope_hash BINARY(32) NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_by    BINARY(16) NULL,
	used_fence BIGINT NULL,
	used_at    BIGINT NULL,
	INDEX {{table}}_expires_at (expires_at)
) ENGINE=InnoDB;
