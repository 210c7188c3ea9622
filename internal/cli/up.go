package cli

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/up"
)

func newUpCmd(s Streams) *cobra.Command {
	var cfg up.Config
	var verbose bool
	cmd := &cobra.Command{
		Use:   "up [--config F] [--data-dir D] [--port N]",
		Short: "Run a head and elastic pools of local worker processes (the embedded default)",
		Long: `Run tide's embedded default on this machine: a head with its SQLite store under
--data-dir (default ~/.tide) listening on 127.0.0.1:--port (default 8000), and for
each pool of --config (default: one pool of local workers of one CPU each, from 0 up
to one per CPU) an autoscaler that starts and stops tide worker processes as work
is submitted. Submit with 'tide submit', watch with 'tide pools', 'tide nodes' and
'tide events -f'. Ctrl-C drains and stops everything it started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(s.Err, &slog.HandlerOptions{Level: level}))
			cfg.OnListen = func(a net.Addr) {
				fmt.Fprintf(s.Out, "tide is up: head at http://%s (Ctrl-C to stop)\n", a)
			}
			return up.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", "", "pools configuration (YAML); a default local pool when empty")
	f.StringVar(&cfg.DataDir, "data-dir", "", "where tide keeps its state (default ~/.tide)")
	f.IntVar(&cfg.Port, "port", 8000, "the head's port on 127.0.0.1")
	f.BoolVarP(&verbose, "verbose", "v", false, "log debug messages")
	return cmd
}
