package sqlstore

// Statement texts, for the benchmarks' raw-SQL baseline and the pgbench
// scripts, which must run exactly what the Store runs.

func (s *Store) ClaimSQL() string    { return s.q.claim.sql }
func (s *Store) CompleteSQL() string { return s.q.complete.sql }
func (s *Store) Table() string       { return s.cfg.Table }
