module github.com/idemkit/idem/inbox/pgxinbox

go 1.26.0

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => ../..

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/jackc/pgx/v5 v5.13.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
