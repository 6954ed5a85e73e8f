//go:build !unix

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr returns the defaults: there are no process groups here.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills p alone.
func killGroup(p *os.Process) error { return p.Kill() }
