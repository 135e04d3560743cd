module github.com/idemkit/idem/outbox/amqpoutbox

go 1.26.0

require (
	github.com/idemkit/idem v0.0.0
	github.com/rabbitmq/amqp091-go v1.16.0
)

replace github.com/idemkit/idem => ../..
