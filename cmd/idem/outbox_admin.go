package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/outbox"
)

const outboxHelp = `Looks at and resolves the messages of a transactional outbox (package
outbox) that the broker refused for good: the relay parks such a message
with the broker's reason, and it holds back the later messages of its
ordering key (never other keys) until an operator requeues it (after the
cause was fixed) or discards it.

The outbox lives in the service's own SQL database: --store names it with
the same DSNs as 'idem keys' (else IDEM_STORE, else sqlite:idem.db), and
--table the outbox table (default idem_outbox, as outbox.Config). Create
the tables with 'idem migrate --outbox' or the service's Outbox.Migrate.
`

const outboxListHelp = `Lists parked messages, oldest first: ID, ordering key, destination,
attempts, age (by the database clock of the enqueue), the reason's class
(too_large, invalid_destination, invalid_header, no_route,
missing_exchange, not_authorized or rejected: the label of the parked
counter in the metrics) and the reason the broker gave. --json prints them
as a JSON array.
`

const outboxShowHelp = `Shows one message of the outbox, in any state (pending, sent, parked,
discarded): its destination, ordering key, attempts, enqueue time and the
last publish error. --json prints it as JSON.
`

const outboxRequeueHelp = `Makes parked messages pending again: the relay publishes each on its next
pass, in its key's order (the later messages of the key follow). Only
parked messages are requeued, each in one conditional UPDATE; a message in
another state is left alone and the command fails, after trying the others.
`

const outboxDiscardHelp = `Gives up pending or parked messages: they are never published, and the
next message of each one's ordering key may go. Each is one conditional
UPDATE; a message already sent or discarded is left alone and the command
fails, after trying the others. The relay's sweeper deletes discarded
messages after its retention.
`

// outboxFlags are the flags every outbox subcommand takes.
type outboxFlags struct {
	dsn, table string
	asJSON     bool
}

func (f *outboxFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "store", "", "the SQL database `DSN` of the outbox (default $IDEM_STORE, else "+defaultStore+"); see 'idem help'")
	fs.StringVar(&f.table, "table", "idem_outbox", "the outbox `TABLE` (schema.table on PostgreSQL and MySQL)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
}

// open opens the outbox the flags name. It creates nothing: no SQLite
// file, no table.
func (f *outboxFlags) open(ctx context.Context) (*storeurl.Handle, *outbox.Outbox, error) {
	d, err := parseStoreDSN(storeDSN(f.dsn))
	if err != nil {
		return nil, nil, err
	}
	switch d.Kind {
	case storeurl.SQLite, storeurl.Postgres, storeurl.MySQL:
	default:
		return nil, nil, usageErr("store %s: an outbox lives in a SQL database (sqlite:PATH, postgres://…, mysql://…)", d)
	}
	h, err := storeurl.Open(d) // no I/O yet
	if err != nil {
		return nil, nil, err
	}
	ob, err := outbox.New(h.DB, &outbox.Config{Dialect: h.Dialect, Table: f.table})
	if err != nil {
		_ = h.Close()
		return nil, nil, usageErr("--table: %v", err)
	}
	if d.Kind == storeurl.SQLite {
		if err := checkSQLiteFile(d, false); err != nil {
			_ = h.Close()
			return nil, nil, err
		}
	}
	// The table name was checked by outbox.New: it is an identifier.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var one int
	if err := h.DB.QueryRowContext(pctx, `SELECT 1 FROM `+f.table+` WHERE 1 = 0`).Scan(&one); !errors.Is(err, sql.ErrNoRows) {
		_ = h.Close()
		return nil, nil, fmt.Errorf("store %s: cannot read the outbox table %s (create it with 'idem migrate --outbox --store DSN'): %w", d, f.table, h.Wrap(err))
	}
	return h, ob, nil
}

// messageView is a stored message as the outbox commands print it.
type messageView struct {
	ID          string    `json:"id"`
	State       string    `json:"state"`
	Destination string    `json:"destination"`
	OrderingKey string    `json:"ordering_key"`
	Attempts    int       `json:"attempts"`
	Enqueued    time.Time `json:"enqueued"`
	AgeSeconds  float64   `json:"age_seconds"`
	Reason      string    `json:"reason"`
	ReasonClass string    `json:"reason_class,omitempty"` // a parked message's outbox.ReasonClass
}

func newMessageView(in outbox.Info, now time.Time) messageView {
	v := messageView{ID: in.ID, State: in.State.String(), Destination: in.Destination, OrderingKey: in.OrderingKey,
		Attempts: in.Attempts, Enqueued: in.Enqueued, AgeSeconds: max(0, now.Sub(in.Enqueued).Seconds()), Reason: in.Reason}
	if in.State == outbox.Parked {
		v.ReasonClass = outbox.ReasonClass(in.Reason)
	}
	return v
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runOutboxList(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("outbox list", stderr)
	var of outboxFlags
	of.register(fs)
	limit := fs.Int("limit", 100, "at most `N` messages")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *limit <= 0 {
		return usageErr("--limit must be positive")
	}
	h, ob, err := of.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	infos, err := ob.Parked(ctx, *limit)
	if err != nil {
		return h.Wrap(err)
	}
	now := time.Now()
	views := make([]messageView, 0, len(infos))
	for _, in := range infos {
		views = append(views, newMessageView(in, now))
	}
	if of.asJSON {
		return writeJSONOut(stdout, views)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tORDERING KEY\tDESTINATION\tATTEMPTS\tAGE\tCLASS\tREASON")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.ID, dash(v.OrderingKey), v.Destination, v.Attempts, age(v.AgeSeconds), v.ReasonClass, shorten(v.Reason, 72))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d parked messages", len(views))
	if len(views) == *limit {
		fmt.Fprintf(stdout, " (--limit %d reached: there may be more)", *limit)
	}
	fmt.Fprintln(stdout)
	return nil
}

// shorten cuts s to n runes, on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return dash(s)
	}
	return string([]rune(s)[:n-1]) + "…"
}

func runOutboxShow(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("outbox show", stderr)
	var of outboxFlags
	of.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one message ID, got %d", fs.NArg())
	}
	h, ob, err := of.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	in, err := ob.Get(ctx, fs.Arg(0))
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no message with ID %q in the outbox %s", fs.Arg(0), of.table)
	} else if err != nil {
		return h.Wrap(err)
	}
	v := newMessageView(in, time.Now())
	if of.asJSON {
		return writeJSONOut(stdout, v)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id:\t%s\n", v.ID)
	fmt.Fprintf(tw, "state:\t%s\n", v.State)
	fmt.Fprintf(tw, "destination:\t%s\n", v.Destination)
	fmt.Fprintf(tw, "ordering key:\t%s\n", dash(v.OrderingKey))
	fmt.Fprintf(tw, "attempts:\t%d\n", v.Attempts)
	fmt.Fprintf(tw, "enqueued:\t%s (%s ago)\n", v.Enqueued.Format(time.RFC3339), age(v.AgeSeconds))
	fmt.Fprintf(tw, "reason:\t%s\n", dash(v.Reason))
	return tw.Flush()
}

func runOutboxRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return outboxAct(ctx, "requeue", args, stdout, stderr)
}

func runOutboxDiscard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return outboxAct(ctx, "discard", args, stdout, stderr)
}

// outboxAct requeues or discards each ID argument.
func outboxAct(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("outbox "+verb, stderr)
	var of outboxFlags
	of.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErr("want one or more message IDs")
	}
	h, ob, err := of.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	act, done, want := ob.Requeue, "requeued: the relay publishes it on its next pass", "parked"
	if verb == "discard" {
		act, done, want = ob.Discard, "discarded: it is never published", "pending or parked"
	}
	type outcome struct {
		ID      string       `json:"id"`
		OK      bool         `json:"ok"`
		Error   string       `json:"error,omitempty"`
		Message *messageView `json:"message,omitempty"`
	}
	var outcomes []outcome
	failed := 0
	for _, id := range fs.Args() {
		o := outcome{ID: id}
		aerr := act(ctx, id)
		switch {
		case aerr == nil:
			o.OK = true
		case errors.Is(aerr, outbox.ErrNotFound):
			// The UPDATE found no row in the state it needs: say which
			// state the message is in (a read for the message only).
			if in, gerr := ob.Get(ctx, id); gerr == nil {
				o.Error = fmt.Sprintf("message %q is %s, not %s: left alone", id, in.State, want)
			} else {
				o.Error = fmt.Sprintf("no message with ID %q in the outbox %s", id, of.table)
			}
		default:
			o.Error = h.Wrap(aerr).Error()
		}
		if in, gerr := ob.Get(ctx, id); gerr == nil {
			v := newMessageView(in, time.Now())
			o.Message = &v
		}
		if !o.OK {
			failed++
		}
		outcomes = append(outcomes, o)
	}
	if of.asJSON {
		if err := writeJSONOut(stdout, outcomes); err != nil {
			return err
		}
	} else {
		for _, o := range outcomes {
			if o.OK {
				fmt.Fprintf(stdout, "%s %s\n", o.ID, done)
			}
		}
	}
	switch {
	case failed == 1 && len(outcomes) == 1:
		return errors.New(outcomes[0].Error)
	case failed > 0:
		var msgs []string
		for _, o := range outcomes {
			if !o.OK {
				msgs = append(msgs, o.Error)
			}
		}
		return fmt.Errorf("%d of %d not %sd: %s", failed, len(outcomes), verb, strings.Join(msgs, "; "))
	}
	return nil
}
