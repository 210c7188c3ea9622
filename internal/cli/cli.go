// Package cli is tide's command line: it parses flags, reads files, calls
// into the packages that do the work and prints their results. It makes no
// decisions of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // something failed at run time
	ExitUsage = 2 // bad flags or bad input: fix the command or the file
)

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
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return flagError{err} })
	root.AddCommand(newDecide(s), newUpCmd(s))
	root.AddCommand(newFleetCmd(s))
	root.AddCommand(newKubeCmd(s))
	root.AddCommand(newSimulateCmd(s))
	root.AddCommand(newPoolsCmd(s), newNodesCmd(s), newEventsCmd(s))
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
