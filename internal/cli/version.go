package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/buildinfo"
)

func newVersionCmd(s Streams) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, commit, build date and Go version",
		Long: `Print which tide this is: its version, the commit it was built from, the build
date and the Go version (set by scripts/release, else read from the build's own
information). 'tide --version' prints the same in one line; the head answers
GET /version with its own, which 'tide pools' shows.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			in := buildinfo.Get()
			if out == "json" {
				return writeJSONOut(s.Out, in)
			}
			_, err := fmt.Fprint(s.Out, in.Text())
			return err
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
