module github.com/idemkit/idem/inbox/amqpinbox

go 1.26.0

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => ../..

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/rabbitmq/amqp091-go v1.16.0
)

require github.com/bits-and-blooms/bitset v1.24.2 // indirect
