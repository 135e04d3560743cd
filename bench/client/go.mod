module github.com/idemkit/idem/bench/client

go 1.26.0

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/idemkit/idem v0.0.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/idemkit/idem => ../..
