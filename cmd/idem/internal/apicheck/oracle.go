package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// oracle counts the effects of requests.
type oracle struct {
	kind    string // "", "id", "count", "cmd"
	pointer string // id: the JSON pointer of the id; count: of the count
	path    string // count: the GET path
	command string // cmd: the shell command
}

func parseOracle(s string) (oracle, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "":
		return oracle{}, nil
	case "id":
		if !strings.HasPrefix(arg, "/") {
			return oracle{}, errors.New("oracle id:POINTER: want a JSON pointer such as id:/id")
		}
		return oracle{kind: kind, pointer: arg}, nil
	case "count":
		path, ptr, _ := strings.Cut(arg, "#")
		if !strings.HasPrefix(path, "/") {
			return oracle{}, errors.New("oracle count:PATH[#POINTER]: want a path on the base URL, e.g. count:/stats#/charges")
		}
		return oracle{kind: kind, path: path, pointer: ptr}, nil
	case "cmd":
		if strings.TrimSpace(arg) == "" {
			return oracle{}, errors.New("oracle cmd:COMMAND: want a command that prints a count")
		}
		return oracle{kind: kind, command: arg}, nil
	}
	return oracle{}, fmt.Errorf("oracle %q: want id:POINTER, count:PATH[#POINTER] or cmd:COMMAND", s)
}

// counts reports whether the oracle counts effects itself (count, cmd), as
// opposed to reading ids out of responses.
func (o oracle) counts() bool { return o.kind == "count" || o.kind == "cmd" }

func (o oracle) String() string {
	switch o.kind {
	case "id":
		return "resource id at " + o.pointer
	case "count":
		return "count endpoint GET " + o.path
	case "cmd":
		return "command"
	}
	return "response bodies"
}

// count reads the current number of effects (count and cmd oracles).
func (o oracle) count(ctx context.Context, c *client) (int64, error) {
	switch o.kind {
	case "count":
		ex := c.send(ctx, request{method: "GET", path: o.path})
		if ex.err != nil {
			return 0, ex.err
		}
		if !ex.ok() {
			return 0, fmt.Errorf("count endpoint answered %d", ex.status)
		}
		return numberAt(ex.body, o.pointer)
	case "cmd":
		out, err := exec.CommandContext(ctx, "sh", "-c", o.command).Output()
		if err != nil {
			return 0, fmt.Errorf("oracle command: %w", err)
		}
		return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	}
	return 0, errors.New("this oracle does not count")
}

// identity returns what tells one execution from another in a 2xx answer:
// the id at the pointer, or the whole body.
func (o oracle) identity(body []byte) string {
	if o.kind == "id" {
		v, err := valueAt(body, o.pointer)
		if err != nil {
			return "(no id: " + err.Error() + ")"
		}
		return string(v)
	}
	return string(body)
}

func numberAt(body []byte, pointer string) (int64, error) {
	v, err := valueAt(body, pointer)
	if err != nil {
		return 0, err
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		s := strings.TrimSpace(string(v))
		return strconv.ParseInt(s, 10, 64)
	}
	return n.Int64()
}

// valueAt returns the raw JSON at an RFC 6901 pointer ("" is the whole body).
func valueAt(body []byte, pointer string) (json.RawMessage, error) {
	cur := json.RawMessage(bytes.TrimSpace(body))
	if pointer == "" {
		return cur, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err == nil {
			v, ok := obj[tok]
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			cur = v
			continue
		}
		var arr []json.RawMessage
		if err := json.Unmarshal(cur, &arr); err != nil {
			return nil, fmt.Errorf("not JSON at %q", tok)
		}
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(arr) {
			return nil, fmt.Errorf("no element %q", tok)
		}
		cur = arr[i]
	}
	return cur, nil
}
