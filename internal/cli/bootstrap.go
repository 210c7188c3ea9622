package cli

import (
	"fmt"
	"path"
	"strings"

	"github.com/spf13/cobra"
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
	blobPath := path.Join(dataDir, "bootstrap.json")
	run := fmt.Sprintf("%s worker --bootstrap %s --data-dir %s", shellQuote(tide), shellQuote(blobPath), shellQuote(path.Join(dataDir, "worker")))
	if format == "cloud-init" {
		return fmt.Sprintf(`#cloud-config
# tide: machine %s joins pool %s. Holds a join credential: user-data only.
write_files:
  - path: %s
    permissions: "0600"
    content: |
      %s
runcmd:
  - [sh, -c, %q]
`, machine, pool, blobPath, blob, "nohup "+run+" >>/var/log/tide-worker.log 2>&1 &")
	}
	return fmt.Sprintf(`#!/bin/sh
# tide: machine %s joins pool %s. Holds a join credential: user-data only.
set -eu
umask 077
mkdir -p %s
cat > %s <<'TIDE_BOOTSTRAP'
%s
TIDE_BOOTSTRAP
exec %s
`, machine, pool, shellQuote(dataDir), shellQuote(blobPath), blob, run)
}

// shellQuote quotes s for sh when it holds anything but safe characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		safe = safe && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-:=+", c))
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
