// Command tide keeps a pool of machines sized to the work waiting for it.
// See README.md; `tide --help` lists the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tide-project/tide/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
