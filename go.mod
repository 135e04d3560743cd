module github.com/idemkit/idem

go 1.26.0

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	go.uber.org/goleak v1.3.0
)

require github.com/stretchr/testify v1.12.1 // indirect

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)
