// Package cli is tide's command line: it parses flags, reads files, calls
// into the packages that do the work and prints their results. It makes no
// decisions of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/buildinfo"
	"github.com/tide-project/tide/internal/client"
)

// Exit codes: one rule for every command (README, "Exit codes").
const (
	ExitOK    = 0
	ExitError = 1 // the operation failed, or `tide result` of a FAILED or CANCELLED instance
	ExitUsage = 2 // bad flags or bad input: fix the command or the file
	// ExitUnreachable: no head answers at the address (not started, wrong
	// --head or TIDE_HEAD).
	ExitUnreachable = 3
)

// exitStatus ends a command with a code and no further message: what
// happened is already printed (tide result of a failed instance).
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// inputError marks an error caused by the user's input (exit code 2).
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// badInput wraps err as an input error.
func badInput(err error) error { return inputError{err} }

// Streams are the standard streams a command uses.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Main runs the tide command line with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, args []string, s Streams) int {
	root := newRoot(s)
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var es exitStatus
	if errors.As(err, &es) {
		return es.code
	}
	if head, ok := unreachable(err); ok {
		fmt.Fprintf(s.Err, "tide: cannot reach the head at %s: %v\n"+
			"tide: start one with `tide up`, or point --head (or %s) at a running head\n", head, rootCause(err), client.EnvHead)
		return ExitUnreachable
	}
	fmt.Fprintf(s.Err, "tide: %v\n", err)
	var ie inputError
	if errors.As(err, &ie) || isFlagError(err) {
		return ExitUsage
	}
	return ExitError
}

func newRoot(s Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "tide",
		Short: "tide keeps a pool of machines sized to the work waiting for it",
		Long: "tide keeps a pool of machines sized to the work waiting for it, at the lowest cost,\n" +
			"without ever killing work that is running.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return flagError{err} })
	root.AddCommand(newVersionCmd(s), newDecide(s), newUpCmd(s))
	root.AddCommand(newFleetCmd(s))
	root.AddCommand(newKubeCmd(s))
	root.AddCommand(newSimulateCmd(s))
	root.AddCommand(newProviderCmd(s))
	root.AddCommand(newPoolsCmd(s), newNodesCmd(s), newEventsCmd(s), newBootstrapCmd(s))
	root.AddCommand(newHeadCmd(s), newWorkerCmd(s), newSubmitCmd(s), newListCmd(s), newGetCmd(s), newLogsCmd(s),
		newCancelCmd(s), newResultCmd(s), newDeleteCmd(s), newWorkersCmd(s))
	return root
}

// flagError marks a flag parsing error (exit code 2).
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

func isFlagError(err error) bool {
	var fe flagError
	if errors.As(err, &fe) {
		return true
	}
	// cobra reports unknown commands and wrong argument counts as plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires ", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// unreachable reports whether err is a failure to connect to the head (no
// listener, unknown host, no route), and the head's address: the request
// never reached a head, so the operation did nothing.
func unreachable(err error) (string, bool) {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return "", false
	}
	var op *net.OpError
	var dns *net.DNSError
	if !(errors.As(ue.Err, &op) && op.Op == "dial") && !errors.As(ue.Err, &dns) {
		return "", false
	}
	head := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		head = u.Scheme + "://" + u.Host
	}
	return head, true
}

// rootCause is the innermost error of a chain (e.g. "connect: connection
// refused").
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
