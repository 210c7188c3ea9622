//go:build !linux

package awstest

import "os/exec"

func setSysProcAttr(cmd *exec.Cmd) {}
