package runtimes

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the process that
// started it dies: a daemon SIGKILLed while it builds a cache or the
// Pyodide snapshot must leave no builder running behind it.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
