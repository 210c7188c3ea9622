package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/provider"
)

func newBootstrapCmd(s Streams) *cobra.Command {
	var (
		cf                           clientFlags
		pool, machine, format        string
		headURL, dataDir, tideBinary string
	)
	cmd := &cobra.Command{
		Use:   "bootstrap --pool P --machine M [--format shell|cloud-init]",
		Short: "Print the script a machine runs at boot to join the head as one worker",
		Long: `Ask the head (admin token) for a join credential scoped to one machine and print
a script that a cloud image runs at boot: it writes the bootstrap blob (the head's
URL, the CA that signed its certificate, the pool, the machine id and the
credential) to a private file and starts 'tide worker --bootstrap' on it.

The credential registers only that machine in that pool, expires if unused
(the head's --credential-ttl) and stops working once the machine is deleted.
The script holds a secret: hand it to the machine only (user-data), not to logs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pool == "" || machine == "" {
				return badInput(fmt.Errorf("--pool and --machine are required"))
			}
			if format != "shell" && format != "cloud-init" {
				return badInput(fmt.Errorf("--format %q: want shell or cloud-init", format))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			blob, err := c.Bootstrap(cmd.Context(), pool, machine, headURL)
			if err != nil {
				return headError(err)
			}
			fmt.Fprint(s.Out, bootstrapScript(format, strings.TrimSpace(string(blob)), dataDir, tideBinary, machine, pool))
			return nil
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "pool the machine joins (required)")
	f.StringVar(&machine, "machine", "", "the machine's id, its worker name (required)")
	f.StringVar(&format, "format", "shell", "shell (a #!/bin/sh script) or cloud-init (#cloud-config user-data)")
	f.StringVar(&headURL, "head-url", "", "head URL the machine uses (default: the head's advertised URL, else --head)")
	f.StringVar(&dataDir, "data-dir", "/var/lib/tide", "the machine's tide directory (blob and worker data)")
	f.StringVar(&tideBinary, "tide", "tide", "path of the tide binary on the machine")
	return cmd
}

// bootstrapScript renders the boot script; blob is one line of JSON.
func bootstrapScript(format, blob, dataDir, tide, machine, pool string) string {
	return provider.BootScript(format, []byte(blob), dataDir, tide, machine, pool)
}
