package cli

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/config"
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
			cfg.OnListen = func(a net.Addr) { fmt.Fprintln(s.Out, upLine(a)) }
			if err := checkUpConfig(cfg.ConfigPath); err != nil {
				return badInput(err) // exit 2, as under tide decide; nothing is created
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

// upLine is the one line `tide up` prints once it listens: where the head
// is and where to look next.
func upLine(a net.Addr) string {
	url := "http://" + a.String()
	next := "tide pools"
	if tcp, ok := a.(*net.TCPAddr); ok && tcp.Port != 8000 {
		next = "TIDE_HEAD=" + url + " tide pools"
	}
	return fmt.Sprintf("tide is up: head at %s (port %s); watch it with `%s` or `tide events -f`; Ctrl-C to stop",
		url, portOf(a), next)
}

func portOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return fmt.Sprint(tcp.Port)
	}
	return a.String()
}

// checkUpConfig validates the pools file before anything starts.
func checkUpConfig(path string) error {
	if path == "" {
		return nil
	}
	f, err := config.Load(path)
	if err != nil {
		return err
	}
	for _, p := range f.Pools {
		if p.Provider.Type != "local" {
			return fmt.Errorf("%s: pool %q: provider.type: tide up runs local pools only, got %q", path, p.Name, p.Provider.Type)
		}
	}
	return nil
}
