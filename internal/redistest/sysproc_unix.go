//go:build unix && !linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts a server and any child it forks (the RDB child of a full
// sync) in a process group of their own, so killGroup reaches them all.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends SIGKILL to p's process group.
func killGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }
