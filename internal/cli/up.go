package cli

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/up"
)

func newUpCmd(s Streams) *cobra.Command {
	var cfg up.Config
	var verbose bool
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "up [--config F] [--data-dir D] [--port N]",
		Short: "Run a head and elastic pools of local worker processes (the embedded default)",
		Long: `Run tide's embedded default on this machine: a head with its SQLite store under
--data-dir (default ~/.tide) listening on 127.0.0.1:--port (default 8000), and for
each pool of --config (default: one pool of local workers of one CPU each, from 0 up
to one per CPU) an autoscaler that starts and stops tide worker processes as work
is submitted. Submit with 'tide submit', watch with 'tide pools', 'tide nodes' and
'tide events -f'. It is 'tide head --config' plus the default local pool: with
--config, SIGHUP re-reads the file.

Ctrl-C drains: the head stops placing work, running instances are cancelled
with their grace period (SIGTERM, then SIGKILL) and recorded CANCELLED, the
workers are drained and deleted, then tide up exits. A second Ctrl-C exits at
once (workers left running are adopted by the next start).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if verbose {
				lf.level = "debug"
			}
			log, err := lf.logger(s.Err, "up")
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.TLS != "" && cfg.TLS != "auto" {
				return badInput(fmt.Errorf("--tls %q: the only mode is auto", cfg.TLS))
			}
			if cfg.TLS != "" && (cfg.TLSCertFile != "" || cfg.TLSKeyFile != "") {
				return badInput(fmt.Errorf("--tls auto makes its own certificate: drop --tls-cert and --tls-key"))
			}
			if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
				return badInput(fmt.Errorf("--tls-cert and --tls-key go together"))
			}
			if cfg.Token == "" {
				cfg.Token = os.Getenv(client.EnvToken)
			}
			if cfg.Addr != "" {
				if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
					cfg.Addr = net.JoinHostPort(strings.Trim(cfg.Addr, "[]"), strconv.Itoa(cfg.Port))
				}
			}
			scheme := "http"
			if cfg.TLS != "" || cfg.TLSCertFile != "" {
				scheme = "https"
			}
			cfg.OnListen = func(a net.Addr) { fmt.Fprintln(s.Out, upLine(scheme, a)) }
			if cfg.ConfigPath != "" {
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				cfg.Reload = hup
			}
			return assemblyError(up.Run(cmd.Context(), cfg))
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", "", "pools configuration (YAML); a default local pool when empty")
	f.StringVar(&cfg.DataDir, "data-dir", "", "where tide keeps its state (default ~/.tide)")
	f.IntVar(&cfg.Port, "port", 8000, "the head's port on 127.0.0.1")
	f.StringVar(&cfg.Addr, "addr", "", "address to listen on, host or host:port (default 127.0.0.1); beyond loopback needs --token")
	f.StringVar(&cfg.Token, "token", "", "admin token required by the API (env "+client.EnvToken+")")
	f.StringVar(&cfg.TLS, "tls", "", "auto: create a CA and a server certificate under --data-dir/tls and serve HTTPS")
	f.StringArrayVar(&cfg.TLSSANs, "tls-san", nil, "extra host name or IP the --tls auto certificate names (repeatable)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "TLS certificate (PEM); serves HTTPS with --tls-key")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "TLS private key (PEM)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log debug messages (--log-level debug)")
	lf.register(cmd)
	return cmd
}

// upLine is the one line `tide up` prints once it listens: where the head
// is and where to look next.
func upLine(scheme string, a net.Addr) string {
	url := scheme + "://" + a.String()
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
