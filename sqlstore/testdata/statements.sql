-- postgres claim
WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now, set_config('synchronous_commit', 'on', true) AS pin),
ins AS (
	INSERT INTO {{table}} (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at)
	SELECT $1, 1, $2, $3, c.now, NULL, c.now, c.now + $4, c.now + $5 FROM c
	ON CONFLICT (key_hash) DO NOTHING
	RETURNING fence
)
SELECT true, 0::smallint, NULL::bytea, ins.fence, 0::bigint, 0::bigint, NULL::bytea, c.now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM ins, c
UNION ALL
SELECT false, t.state, t.fingerprint, t.fence, t.lease_until, t.expires_at,
	CASE WHEN t.state = 2 AND t.fingerprint = $2 AND t.expires_at > c.now THEN t.result END, c.now, c.now
FROM {{table}} t, c
WHERE t.key_hash = $1 AND NOT EXISTS (SELECT 1 FROM ins);

-- postgres complete
WITH p AS (SELECT set_config('synchronous_commit', 'on', true) AS pin)
UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, state = 2, lease_until = 0
FROM p WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2);

-- mysql claim
;

-- mysql complete
UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE ? END, state = 2, lease_until = 0, rev = rev + 1
WHERE key_hash = ? AND owner = ? AND state IN (1, 2);

-- sqlite claim
;

-- sqlite complete
UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE ?3 END, state = 2, lease_until = 0
WHERE key_hash = ?1 AND owner = ?2 AND state IN (1, 2);

