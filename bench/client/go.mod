module github.com/idemkit/idem/bench/client

go 1.26.0

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/idemkit/idem v0.0.0
)

require github.com/hashicorp/go-cleanhttp v0.5.2 // indirect

replace github.com/idemkit/idem => ../..
