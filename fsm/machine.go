package fsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Definition declares a one-directional state machine: its states, the state
// every row starts in, and the named transitions between them.
type Definition struct {
	// Initial is the state new rows are inserted with. Every other state must
	// be reachable from it.
	Initial string
	// States lists every state. A state name is a plain identifier (letters,
	// digits and _), stored as text in the status column.
	States []string
	// Transitions lists the moves a row may make. Nothing else can run: a
	// path that is not declared (PAID → SHIPPED without a check) does not exist.
	Transitions []Transition
}

// Transition is a named move from one of several states to one state.
type Transition struct {
	Name string   // what callers fire, e.g. "pay"
	From []string // states the row may be in; at least one
	To   string   // the state the row ends in
}

// Config names the columns and tunes Fire. A nil *Config means
// the defaults.
type Config struct {
	// IDColumn, StatusColumn and VersionColumn name the columns. The defaults
	// are "id", "status" and "version". The id column must be unique (a
	// primary key); status holds text; version is an integer.
	IDColumn      string
	StatusColumn  string
	VersionColumn string

	// FenceColumn names an integer column (e.g. "fence BIGINT NOT NULL
	// DEFAULT 0") that holds the fencing token of the last fenced transition,
	// for Options.Fence. Empty (the default): no fences.
	FenceColumn string

	// MaxAttempts bounds how often Fire runs its UPDATE when it keeps losing
	// a race (the row was still in a source state when classified). Default 3.
	MaxAttempts int

	// OnIllegalFunc, when set, is called (synchronously, before Fire returns)
	// for every illegal transition: the row is in a state from which the
	// transition can neither run nor have run. That is a data anomaly or a
	// bug upstream; this is the place to page a human.
	OnIllegalFunc func(ctx context.Context, err *IllegalTransitionError)
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.IDColumn == "" {
		out.IDColumn = "id"
	}
	if out.StatusColumn == "" {
		out.StatusColumn = "status"
	}
	if out.VersionColumn == "" {
		out.VersionColumn = "version"
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = 3
	}
	return out
}

func (c *Config) validate() error {
	var errs []error
	for _, col := range []struct{ what, name string }{
		{"IDColumn", c.IDColumn}, {"StatusColumn", c.StatusColumn}, {"VersionColumn", c.VersionColumn},
	} {
		if err := checkIdent("Config."+col.what, col.name, false); err != nil {
			errs = append(errs, err)
		}
	}
	if strings.EqualFold(c.IDColumn, c.StatusColumn) || strings.EqualFold(c.IDColumn, c.VersionColumn) ||
		strings.EqualFold(c.StatusColumn, c.VersionColumn) {
		errs = append(errs, configError("Config.VersionColumn", fmt.Sprintf("the id, status and version columns must differ, ignoring case (got %q, %q, %q)",
			c.IDColumn, c.StatusColumn, c.VersionColumn)))
	}
	if c.FenceColumn != "" {
		if err := checkIdent("Config.FenceColumn", c.FenceColumn, false); err != nil {
			errs = append(errs, err)
		}
		for _, other := range []string{c.IDColumn, c.StatusColumn, c.VersionColumn} {
			if strings.EqualFold(c.FenceColumn, other) {
				errs = append(errs, configError("Config.FenceColumn", fmt.Sprintf("%q is also the %q column", c.FenceColumn, other)))
			}
		}
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, configError("Config.MaxAttempts", fmt.Sprintf("must be at least 1, got %d", c.MaxAttempts)))
	}
	return errors.Join(errs...)
}

// Machine runs the transitions of one Definition against one table. It is
// immutable and safe for concurrent use.
type Machine struct {
	dialect Dialect
	table   string
	cfg     Config
	def     Definition

	index       map[string]int        // state name → position in def.States
	transitions map[string]Transition // by name
	// after[t][s] is true when every path from Initial to state s passes
	// through state t (t dominates s), s ≠ t. A row in s has therefore been
	// in t: a transition to t has already happened.
	after [][]bool
}

// New checks def and returns a Machine that runs it on table (optionally
// schema-qualified) in the given dialect. It fails with a clear error on an
// unknown or duplicate state, a transition that names an undeclared state, a
// cycle (the machine must be one-directional), or a state the initial state
// cannot reach.
func New(dialect Dialect, table string, def Definition, cfg *Config) (*Machine, error) {
	if err := dialect.Check("fsm", "dialect"); err != nil {
		return nil, err
	}
	if err := checkIdent("table", table, true); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Machine{dialect: dialect, table: table, cfg: c, def: cloneDefinition(def)}
	if err := m.build(); err != nil {
		return nil, err
	}
	return m, nil
}

func cloneDefinition(d Definition) Definition {
	out := Definition{Initial: d.Initial, States: append([]string(nil), d.States...)}
	for _, t := range d.Transitions {
		t.From = append([]string(nil), t.From...)
		out.Transitions = append(out.Transitions, t)
	}
	return out
}

func (m *Machine) build() error {
	def := m.def
	if len(def.States) == 0 {
		return configError("Definition.States", "empty: the definition declares no states")
	}
	m.index = make(map[string]int, len(def.States))
	for i, s := range def.States {
		if err := checkName("Definition.States", s); err != nil {
			return err
		}
		if _, dup := m.index[s]; dup {
			return configError("Definition.States", fmt.Sprintf("state %q declared twice", s))
		}
		m.index[s] = i
	}
	if def.Initial == "" {
		return configError("Definition.Initial", "empty: the definition has no initial state")
	}
	if _, ok := m.index[def.Initial]; !ok {
		return configError("Definition.Initial", fmt.Sprintf("state %q is not declared in States", def.Initial))
	}

	n := len(def.States)
	next := make([][]int, n) // adjacency, in declaration order
	m.transitions = make(map[string]Transition, len(def.Transitions))
	for _, t := range def.Transitions {
		if err := checkName("Definition.Transitions", t.Name); err != nil {
			return err
		}
		if _, dup := m.transitions[t.Name]; dup {
			return configError("Definition.Transitions", fmt.Sprintf("transition %q declared twice", t.Name))
		}
		to, ok := m.index[t.To]
		if !ok {
			return configError("Definition.Transitions", fmt.Sprintf("transition %q goes to unknown state %q", t.Name, t.To))
		}
		if len(t.From) == 0 {
			return configError("Definition.Transitions", fmt.Sprintf("transition %q has no source state", t.Name))
		}
		seen := map[string]bool{}
		for _, f := range t.From {
			from, ok := m.index[f]
			if !ok {
				return configError("Definition.Transitions", fmt.Sprintf("transition %q comes from unknown state %q", t.Name, f))
			}
			if seen[f] {
				return configError("Definition.Transitions", fmt.Sprintf("transition %q lists source state %q twice", t.Name, f))
			}
			seen[f] = true
			if from == to {
				return configError("Definition.Transitions", fmt.Sprintf("transition %q loops on state %q: states only move forward", t.Name, f))
			}
			next[from] = append(next[from], to)
		}
		m.transitions[t.Name] = t
	}

	if cyc := findCycle(next, def.States); cyc != nil {
		return configError("Definition.Transitions", fmt.Sprintf("cycle %s: states must only move forward (one-directional, acyclic)",
			strings.Join(cyc, " → ")))
	}
	init := m.index[def.Initial]
	reach := reachable(next, init, -1)
	var lost []string
	for i, s := range def.States {
		if !reach[i] {
			lost = append(lost, s)
		}
	}
	if len(lost) > 0 {
		return configError("Definition.States", fmt.Sprintf("state(s) %s unreachable from initial state %q", strings.Join(lost, ", "), def.Initial))
	}

	// Dominators by brute force: the machines are small (tens of states).
	m.after = make([][]bool, n)
	for t := range n {
		m.after[t] = make([]bool, n)
		without := reachable(next, init, t)
		for s := range n {
			m.after[t][s] = s != t && !without[s]
		}
	}
	return nil
}

// checkName allows the characters of a plain identifier, so that names are
// safe in error messages, logs and the Mermaid diagram.
func checkName(what, name string) error { return checkIdent(what, name, false) }

// reachable marks the states reachable from start without entering skip
// (skip < 0: nothing skipped; skip == start: nothing reachable).
func reachable(next [][]int, start, skip int) []bool {
	seen := make([]bool, len(next))
	if start == skip {
		return seen
	}
	stack := []int{start}
	seen[start] = true
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, t := range next[s] {
			if t != skip && !seen[t] {
				seen[t] = true
				stack = append(stack, t)
			}
		}
	}
	return seen
}

// findCycle returns one cycle as state names (first state repeated at the
// end), or nil.
func findCycle(next [][]int, names []string) []string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(next))
	parent := make([]int, len(next))
	var cycle []string
	var visit func(int) bool
	visit = func(s int) bool {
		color[s] = grey
		for _, t := range next[s] {
			switch color[t] {
			case grey:
				path := []string{names[t]}
				for x := s; x != t; x = parent[x] {
					path = append(path, names[x])
				}
				for i, j := 1, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				cycle = append(path, names[t])
				return true
			case white:
				parent[t] = s
				if visit(t) {
					return true
				}
			}
		}
		color[s] = black
		return false
	}
	for s := range next {
		if color[s] == white && visit(s) {
			return cycle
		}
	}
	return nil
}

// Initial returns the state new rows are inserted with.
func (m *Machine) Initial() string { return m.def.Initial }

// Transition returns the declared transition called name.
func (m *Machine) Transition(name string) (Transition, bool) {
	t, ok := m.transitions[name]
	if ok {
		t.From = append([]string(nil), t.From...)
	}
	return t, ok
}

// Mermaid returns the machine as a Mermaid stateDiagram-v2: an arrow from
// [*] to the initial state, one labelled arrow per source of each transition
// in declaration order, and an arrow to [*] from each final state.
func (m *Machine) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", m.def.Initial)
	final := make(map[string]bool, len(m.def.States))
	for _, s := range m.def.States {
		final[s] = true
	}
	for _, t := range m.def.Transitions {
		for _, f := range t.From {
			fmt.Fprintf(&b, "    %s --> %s: %s\n", f, t.To, t.Name)
			final[f] = false
		}
	}
	for _, s := range m.def.States {
		if final[s] {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	return b.String()
}
