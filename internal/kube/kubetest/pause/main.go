// Command pause is the sandbox process of the test pods' sandbox image
// (kubetest.Images): PID 1 of a pod, it waits for SIGTERM or SIGINT and
// reaps the orphans the pod's containers leave to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var st syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
