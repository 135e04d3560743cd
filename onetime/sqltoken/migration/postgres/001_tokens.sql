-- One row per issued token. Only SHA-256 digests are stored; times are unix
-- microseconds by the database's clock.
CREATE TABLE IF NOT EXISTS {{table}} (
	token_hash BYTEA PRIMARY KEY,
	scope_hash BYTEA NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_by    BYTEA,
	used_fence BIGINT,
	used_at    BIGINT
);
CREATE INDEX IF NOT EXISTS {{table}}_expires_at ON {{table}} (expires_at);
