module github.com/idemkit/idem/inbox/natsinbox

go 1.26.0

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => ../..

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
