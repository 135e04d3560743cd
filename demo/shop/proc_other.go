//go:build !unix

package shop

import "os/exec"

// Supported reports whether the demo runs on this platform: it starts child
// processes in process groups of their own and SIGKILLs them, which only
// Unix systems offer. Elsewhere the package builds, so that the rest of a
// binary that links it does, and idem demo says it cannot run.
const Supported = false

func ownProcessGroup(*exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
