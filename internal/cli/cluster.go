package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/agent"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/logfmt"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// defaultDataDir is ~/.tide/<sub>, or .tide/<sub> without a home.
func defaultDataDir(sub string) string {
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".tide", sub)
	}
	return filepath.Join(home, ".tide", sub)
}

// logFlags are the --log-level and --log-format of a long-running command.
type logFlags struct{ level, format string }

func (l *logFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&l.format, "log-format", "text", "text, or json: one object a line with time, level, msg, component, pool, ...")
}

// logger is the command's logger on w, its records tagged with component.
func (l *logFlags) logger(w io.Writer, component string) (*slog.Logger, error) {
	log, err := logfmt.New(w, l.level, l.format, component)
	if err != nil {
		return nil, badInput(err)
	}
	return log, nil
}

// announcer returns how a command says where it is (listening on, joined):
// a plain line on w, or with --log-format json a record of log, so that every
// line a log pipeline reads is JSON.
func (l *logFlags) announcer(w io.Writer, log *slog.Logger) func(msg string, args ...any) {
	if l.format == "json" {
		return func(msg string, args ...any) { log.Info(msg, args...) }
	}
	return func(msg string, _ ...any) { fmt.Fprintln(w, msg) }
}

func newHeadCmd(s Streams) *cobra.Command {
	var (
		cfg        head.Config
		addr       string
		lf         logFlags
		tokenFiles tokenFileFlags
		tlsMode    string
		tlsSANs    []string
		tlsCA      string
		configPath string
	)
	cmd := &cobra.Command{
		Use:   "head",
		Short: "Run the cluster head: HTTP API (PyLet-compatible), scheduler and state in SQLite",
		Long: `Run the cluster head: the HTTP API (PyLet's paths and shapes), the scheduler,
liveness and the long-poll heartbeat that workers hold, with the state in SQLite
under --data-dir. It listens on 127.0.0.1:8000 unless told otherwise; listening
beyond loopback needs a token (--token, or $TIDE_TOKEN) or --insecure.
Workers join with --join-token ($TIDE_JOIN_TOKEN), or the admin token, or a
bootstrap blob ('tide bootstrap') whose credential registers one machine only.

--tls auto serves HTTPS without hand-made certificates: on first start it
creates a CA and a server certificate under --data-dir/tls (kept across
restarts; the server certificate names every address the head listens on,
and is reissued from the same CA when one is missing) and hands the CA
certificate out in every bootstrap blob.

With --config FILE the head also runs the pools of FILE (the YAML of tide up
--config): one autoscaler per pool, the same code tide up runs. SIGHUP re-reads
FILE: new pools start, changed pools keep their machines, removed pools drain
and release theirs; a file that fails validation is refused as a whole and the
running pools are untouched.

With --store etcd://host:2379,... the state lives in etcd instead, and several
heads may share it: one leads (it places instances and runs the pools), every
head serves the whole API, and a standby takes over within about --lease-ttl
when the leader dies. Give workers every head: tide worker --head URL1,URL2,...
(docs/etcd-store.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Port < 0 || cfg.Port > 65535 {
				return badInput(fmt.Errorf("--port %d is out of range", cfg.Port))
			}
			if addr != "" {
				if _, _, err := net.SplitHostPort(addr); err != nil {
					addr = net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(cfg.Port))
				}
				cfg.Addr = addr
			}
			if err := tokenFiles.read(&cfg.Token, &cfg.JoinToken); err != nil {
				return err
			}
			if cfg.Token == "" {
				cfg.Token = os.Getenv(client.EnvToken)
			}
			if cfg.JoinToken == "" {
				cfg.JoinToken = os.Getenv("TIDE_JOIN_TOKEN")
			}
			if err := headTLS(&cfg, tlsMode, tlsSANs, tlsCA); err != nil {
				if strings.HasPrefix(err.Error(), "--tls") {
					return badInput(err)
				}
				return err
			}
			log, err := lf.logger(s.Err, "head")
			if err != nil {
				return err
			}
			cfg.Logger = log
			announce := lf.announcer(s.Err, log)
			// /metrics on every head, with or without pools.
			cfg.Registry = prometheus.NewRegistry()
			scheme := "http"
			if cfg.TLSCertFile != "" || cfg.TLSAuto {
				scheme = "https"
			}
			cfg.OnListen = func(a net.Addr) {
				url := scheme + "://" + a.String()
				announce("tide head listening on "+url, "url", url)
			}
			if configPath != "" {
				return runHeadPools(cmd.Context(), announce, configPath, cfg)
			}
			if err := head.Run(cmd.Context(), cfg); err != nil {
				if strings.HasPrefix(err.Error(), "head config:") {
					return badInput(err)
				}
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Port, "port", 8000, "port to listen on (PyLet's default)")
	f.StringVar(&addr, "addr", "", "address to listen on, host or host:port (default 127.0.0.1)")
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir("head"), "directory of the head's SQLite database")
	f.StringVar(&cfg.Token, "token", "", "admin token required by the API (env "+client.EnvToken+")")
	f.StringVar(&cfg.JoinToken, "join-token", "", "token workers register with (env TIDE_JOIN_TOKEN)")
	f.StringVar(&tokenFiles.admin, "token-file", "", "file holding the admin token (e.g. a systemd credential), instead of --token")
	f.StringVar(&tokenFiles.join, "join-token-file", "", "file holding the join token, instead of --join-token")
	f.BoolVar(&cfg.Insecure, "insecure", false, "allow listening beyond loopback without a token")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "TLS certificate (PEM); serves HTTPS with --tls-key")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "TLS private key (PEM)")
	f.StringVar(&tlsMode, "tls", "", "auto: create a CA and a server certificate under --data-dir/tls and serve HTTPS")
	f.StringArrayVar(&tlsSANs, "tls-san", nil, "extra host name or IP the --tls auto certificate names (repeatable)")
	f.StringVar(&tlsCA, "tls-ca", "", "with --tls-cert: PEM file of its CA, handed out in bootstrap blobs")
	f.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "head URL put in bootstrap blobs (default: the URL the admin reached)")
	f.DurationVar(&cfg.CredentialTTL, "credential-ttl", head.DefaultCredentialTTL, "how long a machine's join credential stays good unused")
	f.BoolVar(&cfg.Durable, "durable", false, "fsync every commit (survive power loss, slower)")
	f.DurationVar(&cfg.PollTimeout, "poll-timeout", 30*time.Second, "how long a worker's heartbeat is held without news")
	f.DurationVar(&cfg.SuspectAfter, "suspect-after", 75*time.Second, "silence after which a worker is SUSPECT (poll timeout + 10s at least)")
	f.DurationVar(&cfg.OfflineAfter, "offline-after", 120*time.Second, "silence after which a worker is OFFLINE and its instances UNKNOWN or requeued")
	f.DurationVar(&cfg.LivenessInterval, "liveness-interval", 5*time.Second, "how often worker liveness is checked")
	f.DurationVar(&cfg.FenceMargin, "fence-margin", 5*time.Second, "safety margin of the fencing lease: a worker cut off from the head stops its restartable instances once its last heartbeat + poll timeout + offline-after + liveness interval + this margin has passed, and the head holds their re-run until then (+ grace period + margin); negative turns the lease off")
	f.DurationVar(&cfg.SchedulerInterval, "scheduler-interval", 2*time.Second, "scheduling pass period when nothing changes")
	f.DurationVar(&cfg.DefaultGracePeriod, "grace-period", 30*time.Second, "default SIGTERM→SIGKILL grace period of a cancel")
	f.DurationVar(&cfg.PreemptGrace, "preempt-grace", 30*time.Second, "how long a restartable instance preempted for waiting work of higher priority (on a pool that cannot grow) runs on before it is stopped and requeued; negative: never preempt")
	lf.register(cmd)
	f.StringVar(&configPath, "config", "", "pools configuration (YAML) to autoscale; re-read on SIGHUP")
	f.StringVar(&cfg.Store, "store", "", "where the state lives: sqlite (default, under --data-dir) or etcd://host:2379,host:2379[/prefix], shared by several heads of which one leads")
	f.StringVar(&cfg.EtcdCA, "etcd-ca", "", "with --store etcd://: PEM CA of etcd's certificates (talk TLS to etcd)")
	f.StringVar(&cfg.EtcdCert, "etcd-cert", "", "with --etcd-ca: client certificate (PEM) presented to etcd")
	f.StringVar(&cfg.EtcdKey, "etcd-key", "", "with --etcd-cert: its private key (PEM)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 3*time.Second, "with --store etcd://: the leader's election lease; a standby takes over about this long after the leader dies")
	return cmd
}

// tokenFileFlags name files that hold tokens, so that a token never shows in
// a command line (ps, /proc) or an environment: systemd's LoadCredential
// hands them over this way (deploy/systemd).
type tokenFileFlags struct{ admin, join string }

// read puts the files' tokens into admin and join (nil: not this
// command's); a flag given both ways, or an empty file, is refused.
func (t tokenFileFlags) read(admin, join *string) error {
	for _, f := range []struct {
		flag, path string
		into       *string
	}{{"--token-file", t.admin, admin}, {"--join-token-file", t.join, join}} {
		if f.path == "" || f.into == nil {
			continue
		}
		if *f.into != "" {
			return badInput(fmt.Errorf("%s: the token is also given on the command line; give it one way", f.flag))
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return badInput(fmt.Errorf("%s: %w", f.flag, err))
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" || strings.ContainsAny(tok, "\n\r") {
			return badInput(fmt.Errorf("%s %s: want one line holding the token", f.flag, f.path))
		}
		*f.into = tok
	}
	return nil
}

// headTLS applies --tls auto (or --tls-ca with --tls-cert) to cfg.
func headTLS(cfg *head.Config, mode string, sans []string, caFile string) error {
	switch mode {
	case "":
		if caFile != "" {
			if cfg.TLSCertFile == "" {
				return errors.New("--tls-ca needs --tls-cert and --tls-key")
			}
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.CACertPEM = pem
		}
		return nil
	case "auto":
	default:
		return fmt.Errorf("--tls %q: the only mode is auto", mode)
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" || caFile != "" {
		return errors.New("--tls auto makes its own certificate: drop --tls-cert, --tls-key and --tls-ca")
	}
	// The head makes or reuses them once it holds the data dir.
	cfg.TLSAuto, cfg.TLSHosts = true, sans
	return nil
}

// readBootstrap reads a bootstrap blob from path ("-": in).
func readBootstrap(path string, in io.Reader) ([]byte, error) {
	var data []byte
	var err error
	if path == "-" {
		if in == nil {
			return nil, errors.New("--bootstrap -: no standard input")
		}
		data, err = io.ReadAll(io.LimitReader(in, provider.MaxBootstrapSize+1))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--bootstrap: %w", err)
	}
	return data, nil
}

// useBootstrap puts bootstrap blob data, read from path, into cfg.
func useBootstrap(cfg *agent.Config, path string, data []byte, haveCA bool) error {
	b, err := tideprovider.ParseBootstrap(bytes.TrimSpace(data))
	if err != nil {
		return fmt.Errorf("--bootstrap %s: %w", path, err)
	}
	if !haveCA {
		cfg.HTTPClient = nil
	}
	if err := cfg.UseBootstrap(b); err != nil {
		return fmt.Errorf("--bootstrap %s: %w", path, err)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	return nil
}

func newWorkerCmd(s Streams) *cobra.Command {
	var (
		cfg                 agent.Config
		cf                  clientFlags
		cpu, memory, ports  string
		gpus                int64
		labels              []string
		lf                  logFlags
		tokenFiles          tokenFileFlags
		logMaxBytes, logMax string
		bootstrapFile       string
	)
	cmd := &cobra.Command{
		Use:   "worker --head URL --name NAME | worker --bootstrap FILE",
		Short: "Run a worker: join a head and run the instances it places here",
		Long: `Run a worker: register with the head, long-poll it for the instances placed
here and run them as local processes, serving their logs to the head.

The worker keeps its identity, the records of its processes and their logs in
--data-dir: restarted on the same directory it keeps its name, adopts the
processes still running and reports those that ended meanwhile, so nothing
runs twice. CPU and memory are detected unless given.

With --bootstrap FILE (or - for standard input) the worker joins with a
bootstrap blob ('tide bootstrap', or what a provider hands a machine): the
head's URL, the CA that signed its certificate, the pool, the machine's name
and a credential that registers only that machine. A Kubernetes join
document (what 'tide kube' hands its machines) instead makes this process
the machine's Node agent, as 'tide kube node --bootstrap FILE' does: the
other flags are then unused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := lf.logger(s.Err, "worker")
			if err != nil {
				return err
			}
			cfg.HeadURL = cf.head
			if cfg.HeadURL == "" {
				cfg.HeadURL = os.Getenv(client.EnvHead)
			}
			if cfg.HeadURL == "" {
				cfg.HeadURL = client.DefaultHead
			}
			if err := tokenFiles.read(nil, &cfg.JoinToken); err != nil {
				return err
			}
			if cfg.JoinToken == "" {
				cfg.JoinToken = os.Getenv("TIDE_JOIN_TOKEN")
			}
			if cfg.JoinToken == "" {
				cfg.JoinToken = cf.token
			}
			if cfg.JoinToken == "" {
				cfg.JoinToken = os.Getenv(client.EnvToken)
			}
			if cpu != "" {
				if cfg.Resources.MilliCPU, err = capacity.ParseCPU(cpu); err != nil {
					return badInput(fmt.Errorf("--cpu: %w", err))
				}
			}
			if memory != "" {
				if cfg.Resources.Memory, err = capacity.ParseBytes(memory); err != nil {
					return badInput(fmt.Errorf("--memory: %w", err))
				}
			}
			if gpus < 0 {
				return badInput(fmt.Errorf("--gpus %d must not be negative", gpus))
			}
			cfg.Resources.GPUs = gpus
			if cfg.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			lo, hi, ok := strings.Cut(ports, "-")
			if cfg.PortMin, err = strconv.Atoi(lo); err != nil || !ok {
				return badInput(fmt.Errorf("--port-range %q: want MIN-MAX", ports))
			}
			if cfg.PortMax, err = strconv.Atoi(hi); err != nil {
				return badInput(fmt.Errorf("--port-range %q: want MIN-MAX", ports))
			}
			if cfg.LogSegmentBytes, err = capacity.ParseBytes(logMaxBytes); err != nil {
				return badInput(fmt.Errorf("--log-max-bytes: %w", err))
			}
			cfg.LogMaxFiles, err = strconv.Atoi(logMax)
			if err != nil || cfg.LogMaxFiles < 1 {
				return badInput(fmt.Errorf("--log-max-files %q: want a positive integer", logMax))
			}
			if cfg.HTTPClient, err = httpClient(cf.caCert, 0); err != nil {
				return badInput(err)
			}
			if bootstrapFile != "" {
				data, err := readBootstrap(bootstrapFile, s.In)
				if err != nil {
					return badInput(err)
				}
				if tideprovider.IsNodeJoin(data) {
					// tide kube's machine: it joins as a Node.
					return runNodeAgent(cmd.Context(), log.With("component", "node-agent"), bootstrapFile, data, 0, cfg.DataDir)
				}
				if err := useBootstrap(&cfg, bootstrapFile, data, cf.caCert != ""); err != nil {
					return badInput(err)
				}
			}
			cfg.Logger = log
			announce := lf.announcer(s.Err, log)
			cfg.OnReady = func(i agent.Info) {
				announce(fmt.Sprintf("tide worker %s joined %s (logs on %s, %s)", i.WorkerID, cfg.HeadURL, i.LogAddr, i.Resources),
					"worker", i.WorkerID, "head", cfg.HeadURL, "log_addr", i.LogAddr)
			}
			if err := agent.Run(cmd.Context(), cfg); err != nil {
				if strings.HasPrefix(err.Error(), "worker config:") {
					return badInput(err)
				}
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cf.head, "head", "", "head URL, or several heads of one cluster separated by commas (env "+client.EnvHead+", default "+client.DefaultHead+")")
	f.StringVar(&cf.token, "token", "", "admin token, used to join when no join token is given (env "+client.EnvToken+")")
	f.StringVar(&cf.caCert, "ca-cert", "", "PEM file of the CA that signed the head's TLS certificate")
	f.StringVar(&bootstrapFile, "bootstrap", "", "join with a bootstrap blob: a file, or - for standard input (sets the head, CA, pool, name and credential)")
	f.StringVar(&cfg.Name, "name", "", "stable worker name (target_worker); default: the name kept in --data-dir, else a new id")
	f.StringVar(&cfg.JoinToken, "join-token", "", "join token (env TIDE_JOIN_TOKEN)")
	f.StringVar(&tokenFiles.join, "join-token-file", "", "file holding the join token (e.g. a systemd credential), instead of --join-token")
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir("worker"), "identity, process records and logs")
	f.StringVar(&cpu, "cpu", "", "CPU to offer, cores or millicores (\"8\", \"7500m\"); default: all")
	f.StringVar(&memory, "memory", "", "memory to offer (\"16Gi\"); default: the machine's or cgroup's")
	f.Int64Var(&gpus, "gpus", 0, "GPUs to offer")
	f.StringVar(&cfg.Pool, "pool", "", "node pool this worker belongs to")
	f.StringArrayVar(&labels, "label", nil, "worker label key=value (repeatable)")
	f.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "host or IP others reach this worker at (default: the address of the route to the head)")
	f.StringVar(&cfg.LogAddr, "log-addr", "", "log server listen address (default 127.0.0.1:15599 on loopback, else :15599)")
	f.BoolVar(&cfg.Insecure, "insecure", false, "serve logs beyond loopback without a join token")
	f.StringVar(&ports, "port-range", fmt.Sprintf("%d-%d", agent.DefaultPortMin, agent.DefaultPortMax), "ports handed to instances as PORT")
	f.StringVar(&logMaxBytes, "log-max-bytes", "10Mi", "size of one log segment per instance")
	f.StringVar(&logMax, "log-max-files", strconv.Itoa(agent.DefaultLogFiles), "log segments kept per instance")
	f.DurationVar(&cfg.DefaultGracePeriod, "grace-period", agent.DefaultGracePeriod, "SIGTERM→SIGKILL grace when the head gives none")
	f.DurationVar(&cfg.RetryMax, "retry-max", 5*time.Second, "longest wait between attempts to reach the head")
	f.BoolVar(&cfg.StopOnExit, "stop-on-exit", false, "stop every instance when the worker exits (default: leave them to be adopted)")
	lf.register(cmd)
	return cmd
}
