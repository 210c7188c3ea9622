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
	// The first Ctrl-C (or SIGTERM) asks for a graceful stop (tide up
	// drains); then the signals get their default action back, so a second
	// one exits at once.
	go func() { <-ctx.Done(); stop() }()
	code := cli.Main(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
