package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

const versionHelp = `Prints the version of this binary (the release it was built for by
scripts/build-release, or the module version: a release tag when it was
installed with "go install github.com/idemkit/idem/cmd/idem@VERSION",
"(devel)" when built from a checkout), the version control revision it was
built from, when it records one, and the Go release that built it.
`

// stampedVersion is set by release builds:
// go build -ldflags "-X main.stampedVersion=v0.1.0" (scripts/build-release).
// It wins over the module version, which a build from a checkout reports
// as "(devel)".
var stampedVersion string

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("this binary carries no build information")
	}
	fmt.Fprintln(stdout, versionLine(info))
	return nil
}

// versionLine renders build information as
// "idem v1.2.3 (revision 0123abcd, 2026-11-30T10:00:00Z, modified) go1.26.0".
func versionLine(info *debug.BuildInfo) string {
	version := info.Main.Version
	if stampedVersion != "" {
		version = stampedVersion
	}
	if version == "" {
		version = "(unknown)"
	}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	line := "idem " + version
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " (revision " + rev
		if at != "" {
			line += ", " + at
		}
		line += modified + ")"
	}
	return line + " " + info.GoVersion
}
