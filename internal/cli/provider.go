package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/sdk/provider"
)

func newProviderCmd(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Check and serve capacity provider plugins",
		Long: `Provider plugins make any cloud or fleet a tide provider, in any language: they
serve the tide.provider.v1 gRPC protocol (docs/provider-protocol.md), either as
a subprocess tide starts (provider: {type: plugin, options: {command: [...]}})
or as a remote service (options: {address: host:port, tls: {...}, token_file: F}).`,
	}
	cmd.AddCommand(newProviderTestCmd(s), newProviderServeSimCmd(s), newProviderServeLocalCmd(s))
	return cmd
}

// remoteFlags are the flags that reach or serve a remote plugin.
type remoteFlags struct {
	ca, cert, key, serverName, tokenFile string
}

func (f *remoteFlags) tlsFiles() *plugin.TLSFiles {
	if f.ca == "" && f.cert == "" && f.key == "" && f.serverName == "" {
		return nil
	}
	return &plugin.TLSFiles{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key, ServerName: f.serverName}
}

func newProviderTestCmd(s Streams) *cobra.Command {
	var (
		pluginCmd, address, offering, output string
		settle, timeout                      time.Duration
		rf                                   remoteFlags
	)
	cmd := &cobra.Command{
		Use:   "test (--plugin CMD | --address HOST:PORT)",
		Short: "Run tide's provider conformance suite against a plugin and print a pass/fail table",
		Long: `Run tide's provider conformance suite against a plugin: idempotent replays
(a replayed Create provisions nothing), NotFound as the end of Delete, pool
ownership, fencing (a stale epoch is refused), the machine model, typed errors.
--plugin starts CMD (split on spaces) the way tide does; --address dials a
remote plugin (with --tls-* for TLS or mutual TLS, --token-file for a bearer
token). Every subtest runs in its own namespace of pool names and machine ids,
so one plugin instance serves the whole suite; the suite waits for transitions
by polling List (at most --settle per wait). Exits 1 when a subtest fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (pluginCmd == "") == (address == "") {
				return badInput(errors.New("--plugin or --address: set exactly one"))
			}
			if output != "table" && output != "json" {
				return badInput(fmt.Errorf("-o: want table or json, got %q", output))
			}
			o := plugin.Options{Address: address, TLS: rf.tlsFiles(), TokenFile: rf.tokenFile}
			if pluginCmd != "" {
				if o.TLS != nil || o.TokenFile != "" {
					return badInput(errors.New("--tls-* and --token-file apply to --address only"))
				}
				o.Command = strings.Fields(pluginCmd)
			}
			ctx := cmd.Context()
			p, closer, err := plugin.Open(ctx, o, nil)
			if err != nil {
				return err
			}
			defer closer.Close()
			name, version := "?", "?"
			if c, ok := p.(interface {
				Info() (string, string, []string)
			}); ok {
				name, version, _ = c.Info()
			}
			start := time.Now()
			rs, err := plugin.Conform(ctx, p, offering, settle, timeout)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"plugin": name, "version": version, "results": rs}); err != nil {
					return err
				}
			} else {
				printResults(s.Out, name, version, rs, time.Since(start))
			}
			if !providertest.Passed(rs) {
				return errors.New("the plugin does not conform to the provider contract")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pluginCmd, "plugin", "", "plugin command line to start, e.g. \"python3 plugin.py state.json\"")
	f.StringVar(&address, "address", "", "host:port of a remote plugin")
	f.StringVar(&offering, "offering", "", "offering to create machines with (default: the first never interrupted)")
	f.DurationVar(&settle, "settle", 30*time.Second, "longest wait for the plugin's transitions to finish")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "longest run of one subtest")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.StringVar(&rf.ca, "tls-ca", "", "CA file that signs the plugin's certificate")
	f.StringVar(&rf.cert, "tls-cert", "", "client certificate file (mutual TLS)")
	f.StringVar(&rf.key, "tls-key", "", "client key file (mutual TLS)")
	f.StringVar(&rf.serverName, "tls-server-name", "", "name to check in the plugin's certificate")
	f.StringVar(&rf.tokenFile, "token-file", "", "file holding the plugin's bearer token")
	return cmd
}

func printResults(w io.Writer, name, version string, rs []providertest.Result, took time.Duration) {
	fmt.Fprintf(w, "provider conformance: plugin %s %s\n\n", name, version)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEST\tRESULT\tTIME\tDETAIL")
	var passed, failed, skipped int
	for _, r := range rs {
		res := "PASS"
		switch {
		case !r.Passed:
			res = "FAIL"
			failed++
		case r.Skipped:
			res = "SKIP"
			skipped++
		default:
			passed++
		}
		detail := strings.Join(r.Messages, "; ")
		if len(detail) > 160 {
			detail = detail[:157] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, res, r.Duration.Round(time.Millisecond), detail)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped in %s\n", passed, failed, skipped, took.Round(time.Millisecond))
}

func newProviderServeSimCmd(s Streams) *cobra.Command {
	var (
		listen  string
		latency time.Duration
		seed    uint64
		rf      remoteFlags
	)
	cmd := &cobra.Command{
		Use:   "serve-sim [--listen HOST:PORT]",
		Short: "Serve the simulated cloud as a provider plugin",
		Long: `Serve tide's simulated cloud (offerings m8/z1/on-demand and m8/z1/spot, every
transition taking --latency) as a provider plugin. Started by tide
(provider: {type: plugin, options: {command: [tide, provider, serve-sim]}}) it
answers the plugin handshake; with --listen it is a remote plugin, with
--tls-cert/--tls-key for TLS, --tls-ca to require client certificates signed
by that CA (mutual TLS) and --token-file to require a bearer token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cloud, err := plugin.NewSim(nil, latency, seed)
			if err != nil {
				return badInput(err)
			}
			p := cloud
			info := provider.WithInfo(provider.Info{Name: "sim", Version: "tide"})
			if listen == "" {
				if !provider.IsPluginProcess() {
					return badInput(errors.New("serve-sim: tide starts me as a plugin; to serve remote callers, set --listen"))
				}
				provider.Serve(p, info)
				return nil
			}
			var rc provider.RemoteConfig
			if rf.cert != "" || rf.key != "" {
				t, err := (&plugin.TLSFiles{CAFile: rf.ca, CertFile: rf.cert, KeyFile: rf.key}).ServerTLS()
				if err != nil {
					return badInput(fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err))
				}
				rc.TLS = t
			} else if rf.ca != "" {
				return badInput(errors.New("--tls-ca needs --tls-cert and --tls-key"))
			}
			if rf.tokenFile != "" {
				tok, err := plugin.ReadToken(rf.tokenFile)
				if err != nil {
					return badInput(fmt.Errorf("--token-file: %w", err))
				}
				rc.Token = tok
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			return provider.ListenAndServe(ctx, p, listen, rc, func(a net.Addr) {
				fmt.Fprintf(s.Out, "serving the sim provider on %s\n", a)
			}, info)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "serve remote callers on this address (e.g. 127.0.0.1:7443)")
	f.DurationVar(&latency, "latency", 2*time.Second, "how long each transition takes")
	f.Uint64Var(&seed, "seed", 1, "random seed of the simulated cloud")
	f.StringVar(&rf.ca, "tls-ca", "", "CA file: require client certificates it signed (mutual TLS)")
	f.StringVar(&rf.cert, "tls-cert", "", "server certificate file")
	f.StringVar(&rf.key, "tls-key", "", "server key file")
	f.StringVar(&rf.tokenFile, "token-file", "", "require this bearer token (file)")
	return cmd
}

func newProviderServeLocalCmd(s Streams) *cobra.Command {
	var root, offerings string
	cmd := &cobra.Command{
		Use:   "serve-local --root DIR [--offerings JSON]",
		Short: "Serve the local provider (tide worker processes on this machine) as a plugin",
		Long: `Serve the local provider as a plugin that tide starts: each machine is a
` + "`tide worker`" + ` process on this machine, joined to the head named in the bootstrap
blob of Configure, with its state under --root. --offerings is a JSON array of
offerings in the config's form (default: one offering sized to this machine).
On SIGTERM (tide stopping the pool) every worker is stopped before exiting; when
tide merely closes the plugin, workers keep running and are adopted next time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !provider.IsPluginProcess() {
				return badInput(errors.New("serve-local: tide starts me as a plugin (provider.options.command)"))
			}
			if root == "" {
				return badInput(errors.New("--root: must be set"))
			}
			var offs []capacity.Offering
			if offerings != "" {
				if err := strictjson.Decode([]byte(offerings), &offs); err != nil {
					return badInput(fmt.Errorf("--offerings: %w", err))
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			prov, err := local.New(local.Config{Root: root, Command: local.WorkerCommand(exe), Offerings: offs})
			if err != nil {
				return badInput(err)
			}
			term := make(chan os.Signal, 1)
			signal.Notify(term, syscall.SIGTERM)
			go func() {
				<-term
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				code := 0
				if err := prov.Shutdown(ctx); err != nil {
					fmt.Fprintf(s.Err, "serve-local: stopping workers: %v\n", err)
					code = 1
				}
				os.Exit(code)
			}()
			provider.Serve(prov, provider.WithInfo(provider.Info{Name: "local", Version: "tide"}))
			return prov.Close()
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "directory of the provider's state and machines")
	cmd.Flags().StringVar(&offerings, "offerings", "", "JSON array of offerings, e.g. [{\"type\":\"local-1cpu\",\"cpu\":1,\"memory\":\"1Gi\"}]")
	return cmd
}
