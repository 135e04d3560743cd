//go:build unix

package shop

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup puts cmd, before it starts, in a process group of its
// own, so that killProcessGroup reaches every process it forks.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup sends SIGKILL to cmd's process group.
func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// Supported reports whether the demo runs on this platform: it starts child
// processes in process groups of their own and SIGKILLs them, which only
// Unix systems offer.
const Supported = true
