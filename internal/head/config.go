package head

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/tlsauto"
)

// Config configures a head. Zero fields take the defaults listed.
type Config struct {
	// Addr is the listen address; "127.0.0.1:<Port>" when empty.
	Addr string
	// Port is used when Addr is empty; 8000 (PyLet's) when zero.
	Port int
	// DataDir holds tide.db; required.
	DataDir string
	// Token is the admin token for the API; JoinToken the token workers
	// register with (the admin token is accepted too).
	Token     string
	JoinToken string
	// Insecure allows listening beyond loopback without a token.
	Insecure bool
	// TLSCertFile and TLSKeyFile enable HTTPS when both are set.
	TLSCertFile, TLSKeyFile string
	// TLSAuto serves HTTPS with a CA and a server certificate that New
	// makes (or reuses) under DataDir/tls once it holds the data dir (see
	// package tlsauto): the certificate names the listen address and
	// TLSHosts, and the CA is handed out in bootstrap blobs (CACertPEM).
	// It excludes TLSCertFile and TLSKeyFile.
	TLSAuto bool
	// TLSHosts are extra names and addresses the TLSAuto certificate names
	// (--tls-san, the bridges of netns pools).
	TLSHosts []string
	// CACertPEM is the CA certificate handed out in every bootstrap blob
	// (what `--tls auto` created); empty: machines trust their system roots.
	CACertPEM []byte
	// AdvertiseURL is the head URL put in bootstrap blobs minted over the
	// API; empty: the URL the admin's request reached.
	AdvertiseURL string
	// CredentialTTL is how long a machine's join credential stays good
	// unused; once used it lasts until the machine is deleted. 30m.
	CredentialTTL time.Duration
	// Durable makes every SQLite commit fsync (survives power loss).
	Durable bool

	// PollTimeout is how long a heartbeat is held without a change; 30s.
	PollTimeout time.Duration
	// SuspectAfter without a heartbeat makes a worker SUSPECT; it must
	// exceed PollTimeout by at least 10s (PyLet's equal values flap, A14.1).
	// 75s when zero.
	SuspectAfter time.Duration
	// OfflineAfter makes a worker OFFLINE and its instances UNKNOWN (or
	// requeued by their restart policy); > SuspectAfter. 120s when zero.
	OfflineAfter time.Duration
	// LivenessInterval is the period of the liveness check and of the
	// max_wait sweep (maxwait.go); 5s.
	LivenessInterval time.Duration
	// FenceMargin is the safety margin of the fencing lease (issue 16,
	// fence.go): a worker cut off from the head stops its instances that
	// the head requeues (restart on-failure or always) once its last
	// successful heartbeat's send time + PollTimeout + OfflineAfter +
	// LivenessInterval + FenceMargin has passed, and the head holds each
	// instance it requeued from an OFFLINE worker out of scheduling for
	// PollTimeout + LivenessInterval + 2 × FenceMargin + DefaultGracePeriod
	// after declaring it OFFLINE, so the old attempt is gone before a new
	// one starts. It absorbs network delay and clock-rate differences. 5s
	// when zero; negative turns the lease off (workers keep running their
	// instances; requeued ones are placed at once and may run twice).
	FenceMargin time.Duration
	// SchedulerInterval is the period of a scheduling pass when nothing
	// pokes the scheduler; 2s.
	SchedulerInterval time.Duration
	// DefaultGracePeriod is SIGTERM→SIGKILL when a cancel names none; 30s.
	DefaultGracePeriod time.Duration
	// MaxGracePeriod caps a requested grace period; 300s.
	MaxGracePeriod time.Duration
	// ReserveAfter is how long the oldest waiting instance of a pool may be
	// overtaken before a worker is reserved for it; 60s. Negative disables.
	ReserveAfter time.Duration
	// PreemptGrace is how long a running restartable instance chosen to
	// make room for waiting work of higher priority runs on before it is
	// stopped and requeued (priority.go); 30s. Negative disables
	// preemption.
	PreemptGrace time.Duration
	// LogProxyTimeout bounds a log fetch from a worker; 30s.
	LogProxyTimeout time.Duration
	// BodyTimeout bounds how long a request body may take to arrive (a
	// slowloris defence); httpapi.DefaultBodyTimeout when zero.
	BodyTimeout time.Duration
	// HeaderTimeout bounds how long a request's headers may take to arrive
	// (slow headers); 10s when zero. IdleTimeout closes a keep-alive
	// connection that sends no next request (an idle connection would
	// otherwise hold a goroutine for ever); 2m when zero. A held
	// heartbeat is a request in progress, not an idle connection.
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration

	// Clock drives timers; clock.Real{} when nil.
	Clock clock.Clock
	// Logger receives the head's logs; discarded when nil.
	Logger *slog.Logger
	// Registry receives the head's metrics and is served at /metrics; no
	// metrics when nil.
	Registry Registry
	// OnPressure is called with every changed pressure report (per pool),
	// from the scheduler goroutine.
	OnPressure func(map[string]capacity.Pressure)
	// OnWithdraw is called with the pools of waiting work given up on
	// before it was placed (gangs and instances failed by their max_wait,
	// waiting instances cancelled), once the store ended it, so that their
	// autoscalers cancel nodes still booting for it. Nil: none is told.
	OnWithdraw func(pools []string)
	// HTTPClient fetches logs from workers; a client with
	// LogProxyTimeout when nil.
	HTTPClient *http.Client
	// OnListen is called with the bound address once Run listens.
	OnListen func(net.Addr)

	// Route picks the pools of the n replicas of a submitted instance that
	// names no pool and no target_worker, from its labels and resource
	// request (GPUs counted): one pool per replica (a strategy may split
	// them); "" leaves one in the default pool "". It is called once per
	// submit request, on the request's goroutine. Nil: such instances stay
	// in "".
	Route func(labels map[string]string, req capacity.Resources, n int) []string
	// MaxQueued returns the most instances that may wait (PENDING) in a
	// pool; 0 for no cap. A submit that would pass it is refused with 429
	// and a reason. Called once per submit request that lands in a pool.
	// Nil: no pool has a cap.
	MaxQueued func(pool string) int
	// MaxWait returns a pool's max_wait: a PENDING instance of the pool
	// with no max_wait of its own that has waited this long (since it was
	// queued) ends FAILED with the reason "no capacity within <d>: <why it
	// waits>". 0 for none. Called by the leader's sweep (maxwait.go). Nil:
	// only instances' own max_wait applies.
	MaxWait func(pool string) time.Duration
	// PoolStatus returns the autoscaled pools' own view for GET /pools and
	// GET /nodes, in display order; the head merges it with its workers and
	// its last pressure report (Head.SetPoolStatus replaces it). It is
	// called on HTTP goroutines and must be safe for concurrent use. Nil:
	// only the pools the head sees (those of registered workers and of
	// queued instances) are listed, unmanaged.
	PoolStatus func() []PoolStatus
	// EventRetention is how many of the newest events are kept;
	// store.DefaultEventRetention (100,000) when zero.
	EventRetention int
	// EventFollowMax bounds one GET /events?follow=1 stream; a client
	// reconnects with since=<last id>. 1h when zero.
	EventFollowMax time.Duration

	// Store says where the state lives: "" or "sqlite" is tide.db under
	// DataDir (one head); "etcd://host:2379,host:2379[/prefix]" is an etcd
	// cluster several heads share, one of them leading (see ha.go).
	Store string
	// EtcdCA is the PEM CA of the etcd cluster's certificates: with it the
	// head talks to etcd over TLS. EtcdCert and EtcdKey are the head's
	// client certificate and key, when etcd asks for one.
	EtcdCA, EtcdCert, EtcdKey string
	// LeaseTTL is the lease of a leading head's election key: a standby
	// takes over about this long after the leader's machine is lost. 3s
	// when zero; etcd refuses less than its minimum (about 2s).
	LeaseTTL time.Duration
}

// withDefaults returns cfg with defaults applied, or an error naming the
// offending field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.DataDir == "" {
		return cfg, errors.New("head config: data_dir is required")
	}
	if cfg.Port == 0 {
		cfg.Port = 8000
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return cfg, fmt.Errorf("head config: port %d is out of range", cfg.Port)
	}
	if cfg.Addr == "" {
		cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.PollTimeout, 30*time.Second)
	def(&cfg.SuspectAfter, 75*time.Second)
	def(&cfg.OfflineAfter, 120*time.Second)
	def(&cfg.LivenessInterval, 5*time.Second)
	def(&cfg.FenceMargin, 5*time.Second)
	def(&cfg.SchedulerInterval, 2*time.Second)
	def(&cfg.DefaultGracePeriod, 30*time.Second)
	def(&cfg.MaxGracePeriod, 300*time.Second)
	def(&cfg.ReserveAfter, 60*time.Second)
	def(&cfg.PreemptGrace, 30*time.Second)
	def(&cfg.LogProxyTimeout, 30*time.Second)
	def(&cfg.EventFollowMax, time.Hour)
	def(&cfg.CredentialTTL, DefaultCredentialTTL)
	for name, d := range map[string]time.Duration{"poll_timeout": cfg.PollTimeout, "suspect_after": cfg.SuspectAfter,
		"offline_after": cfg.OfflineAfter, "liveness_interval": cfg.LivenessInterval,
		"scheduler_interval": cfg.SchedulerInterval, "default_grace_period": cfg.DefaultGracePeriod,
		"max_grace_period": cfg.MaxGracePeriod, "log_proxy_timeout": cfg.LogProxyTimeout,
		"event_follow_max": cfg.EventFollowMax, "credential_ttl": cfg.CredentialTTL} {
		if d < 0 {
			return cfg, fmt.Errorf("head config: %s must be positive, got %s", name, d)
		}
	}
	if cfg.SuspectAfter < cfg.PollTimeout+10*time.Second {
		return cfg, fmt.Errorf("head config: suspect_after (%s) must exceed poll_timeout (%s) by at least 10s, or idle workers flap",
			cfg.SuspectAfter, cfg.PollTimeout)
	}
	if cfg.OfflineAfter <= cfg.SuspectAfter {
		return cfg, fmt.Errorf("head config: offline_after (%s) must exceed suspect_after (%s)", cfg.OfflineAfter, cfg.SuspectAfter)
	}
	if cfg.DefaultGracePeriod > cfg.MaxGracePeriod {
		return cfg, fmt.Errorf("head config: default_grace_period (%s) exceeds max_grace_period (%s)",
			cfg.DefaultGracePeriod, cfg.MaxGracePeriod)
	}
	def(&cfg.LeaseTTL, 3*time.Second)
	if _, _, err := ParseStoreURL(cfg.Store); err != nil {
		return cfg, fmt.Errorf("head config: %w", err)
	}
	if cfg.EventRetention < 0 {
		return cfg, fmt.Errorf("head config: event_retention must not be negative, got %d", cfg.EventRetention)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return cfg, errors.New("head config: tls_cert_file and tls_key_file must be set together")
	}
	if cfg.TLSAuto && cfg.TLSCertFile != "" {
		return cfg, errors.New("head config: tls auto makes its own certificate: drop tls_cert_file and tls_key_file")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: cfg.LogProxyTimeout}
	}
	return cfg, nil
}

// dbPath is where the head keeps its state.
func (cfg Config) dbPath() string { return filepath.Join(cfg.DataDir, "tide.db") }

// checkExposure refuses to listen beyond loopback without a token, unless
// Insecure is set.
func (cfg Config) checkExposure() error {
	if cfg.Token != "" || cfg.Insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("head config: addr %q: %w", cfg.Addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("head config: listening on %q beyond loopback requires a token (--token) or --insecure", cfg.Addr)
}

// autoTLS makes or reuses the CA and the server certificate of TLSAuto
// under DataDir/tls, naming the listen address and TLSHosts, and returns
// cfg serving them.
func (cfg Config) autoTLS(now time.Time) (Config, error) {
	hosts, err := tlsauto.ListenHosts(cfg.Addr)
	if err != nil {
		return cfg, fmt.Errorf("head config: tls auto: %w", err)
	}
	files, err := tlsauto.Ensure(filepath.Join(cfg.DataDir, "tls"), append(hosts, cfg.TLSHosts...), now)
	if err != nil {
		return cfg, fmt.Errorf("start head: tls auto: %w", err)
	}
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.CACertPEM = files.CertFile, files.KeyFile, files.CAPEM
	return cfg, nil
}

// Registry is where the head registers its metrics and what /metrics
// serves: a *prometheus.Registry, or a wrapper of one (a test that records
// what is registered).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}
