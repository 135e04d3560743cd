module github.com/idemkit/idem/inbox/kafkainbox

go 1.26.0

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => ../..

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/twmb/franz-go v1.22.3
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)
