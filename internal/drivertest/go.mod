module github.com/idemkit/idem/internal/drivertest

go 1.26.0

require (
	github.com/idemkit/idem v0.0.0
	github.com/idemkit/idem/connectidem v0.0.0
	github.com/idemkit/idem/grpcidem v0.0.0
	github.com/idemkit/idem/inbox/amqpinbox v0.0.0
	github.com/idemkit/idem/inbox/kafkainbox v0.0.0
	github.com/idemkit/idem/inbox/natsinbox v0.0.0
	github.com/idemkit/idem/inbox/pgxinbox v0.0.0
	github.com/idemkit/idem/internal/rpcidem v0.0.0
	github.com/idemkit/idem/redis v0.0.0
)

replace (
	github.com/idemkit/idem => ../..
	github.com/idemkit/idem/connectidem => ../../connectidem
	github.com/idemkit/idem/grpcidem => ../../grpcidem
	github.com/idemkit/idem/httpidem/echoidem => ../../httpidem/echoidem
	github.com/idemkit/idem/httpidem/ginidem => ../../httpidem/ginidem
	github.com/idemkit/idem/inbox/amqpinbox => ../../inbox/amqpinbox
	github.com/idemkit/idem/inbox/kafkainbox => ../../inbox/kafkainbox
	github.com/idemkit/idem/inbox/natsinbox => ../../inbox/natsinbox
	github.com/idemkit/idem/inbox/pgxinbox => ../../inbox/pgxinbox
	github.com/idemkit/idem/internal/rpcidem => ../rpcidem
	github.com/idemkit/idem/otelidem => ../../otelidem
	github.com/idemkit/idem/promidem => ../../promidem
	github.com/idemkit/idem/redis => ../../redis
)

require (
	connectrpc.com/connect v1.21.1
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/go-chi/chi/v5 v5.5.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	modernc.org/sqlite v1.62.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemkit/idem/outbox/amqpoutbox v0.0.0
	github.com/idemkit/idem/outbox/kafkaoutbox v0.0.0
	github.com/idemkit/idem/outbox/natsoutbox v0.0.0
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

replace github.com/idemkit/idem/outbox/natsoutbox => ../../outbox/natsoutbox

replace github.com/idemkit/idem/outbox/amqpoutbox => ../../outbox/amqpoutbox

replace github.com/idemkit/idem/outbox/kafkaoutbox => ../../outbox/kafkaoutbox
