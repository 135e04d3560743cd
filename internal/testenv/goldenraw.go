package testenv

import (
	"fmt"
	"strings"
	"time"
)

// GoldenTime is how a golden record file writes a stored time: "T" for the
// record's creation, "T+30s" for a time after it (to the second: a store may
// read its clock more than once in one operation), 0 for none. Stores keep
// times in unix microseconds.
func GoldenTime(created, us int64) any {
	switch {
	case us == 0:
		return 0
	case us == created:
		return "T"
	}
	return "T+" + (time.Duration(us-created) * time.Microsecond).Round(time.Second).String()
}

// ParseGoldenTime is the inverse of GoldenTime for a record created at
// GoldenCreated: the unix microseconds to write into a raw record.
func ParseGoldenTime(v any) (int64, error) {
	switch v := v.(type) {
	case float64:
		if v == 0 {
			return 0, nil
		}
	case string:
		if v == "T" {
			return GoldenCreated.UnixMicro(), nil
		}
		if d, ok := strings.CutPrefix(v, "T+"); ok {
			dur, err := time.ParseDuration(d)
			if err != nil {
				return 0, err
			}
			return GoldenCreated.Add(dur).UnixMicro(), nil
		}
	}
	return 0, fmt.Errorf("golden time %v: want 0, \"T\" or \"T+duration\"", v)
}
