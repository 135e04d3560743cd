-- One row per issued token. Only SHA-256 digests are stored; times are unix
-- microseconds by the database's clock.
CREATE TABLE IF NOT EXISTS {{table}} (
	token_hash BLOB PRIMARY KEY,
	scope_hash BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_by    BLOB,
	used_fence INTEGER,
	used_at    INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {{table}}_expires_at ON {{table}} (expires_at);
