// Package inboxengine_test runs the consumer policy of the inbox broker
// adapters (inbox/internal/adapter.Engine) through natsinbox, amqpinbox and
// kafkainbox on their brokers, from one table.
package inboxengine_test
