//go:build race

package testenv

// raceEnabled reports whether this binary was built with -race.
const raceEnabled = true
