package awstest

import (
	"os/exec"
	"syscall"
)

// setSysProcAttr makes the emulator die with the test binary.
func setSysProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
