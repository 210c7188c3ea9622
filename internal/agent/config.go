package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
)

// Defaults (PyLet's values where PyLet has one, A2).
const (
	DefaultLogPort        = 15599
	DefaultPortMin        = 15600
	DefaultPortMax        = 15700
	DefaultLogSegment     = 10 << 20
	DefaultLogFiles       = 5
	DefaultGracePeriod    = 30 * time.Second
	DefaultHeartbeatLimit = 35 * time.Second
)

// Config configures a worker. Zero fields take the defaults listed.
type Config struct {
	// HeadURL is the head's base URL ("http://host:8000"); "host:port" is
	// accepted too, as PyLet's worker does. Required. Several heads of one
	// cluster (heads sharing etcd) are separated by commas: the worker
	// talks to one and moves to the next when it does not answer.
	HeadURL string
	// Name is the worker's stable name, which target_worker refers to. When
	// empty, the name stored in DataDir is used, else the stored id.
	Name string
	// JoinToken is presented at registration, and required from the head
	// by the log server when set.
	JoinToken string
	// LogToken is also accepted by the log server from the head (a
	// bootstrap blob's log_token).
	LogToken string
	// DataDir holds the identity, the run records of local processes and
	// their logs; required. One worker per data dir (it is locked).
	DataDir string

	// Resources this worker offers. Zero CPU and memory are detected (all
	// CPUs, the machine's or cgroup's memory); GPUs default to none.
	Resources capacity.Resources
	// Pool and Labels are reported at registration.
	Pool   string
	Labels map[string]string

	// AdvertiseAddr is the host or IP the head and clients reach this worker
	// at (endpoints are "<AdvertiseAddr>:<port>"). When empty, the local
	// address of the route to the head is used; PyLet's
	// gethostbyname(gethostname()) often yields 127.0.1.1 (A14.10).
	AdvertiseAddr string
	// LogAddr is the log server's listen address; port 0 picks a free one.
	// When empty: "127.0.0.1:15599" if AdvertiseAddr is loopback, else
	// ":15599".
	LogAddr string
	// Insecure allows serving logs beyond loopback without a join token.
	Insecure bool

	// PortMin and PortMax bound the PORT handed to instances (inclusive);
	// every candidate is bind-tested first (A14.11). 15600..15700 when zero.
	PortMin, PortMax int
	// PortLockDir holds the host-wide port reservations that every worker
	// on this machine shares, so two workers never hand out one port at
	// once (see portPool). DefaultPortLockDir() when empty.
	PortLockDir string
	// DefaultGracePeriod is SIGTERM→SIGKILL for a process stopped without a
	// grace period from the head; 30s.
	DefaultGracePeriod time.Duration
	// HeartbeatTimeout bounds one held heartbeat request; it must exceed the
	// head's poll timeout. 35s.
	HeartbeatTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed request to the
	// head; 5s and 500ms (or RetryMax if lower).
	RetryMin, RetryMax time.Duration
	// AdoptPollInterval is how often an adopted process (one that is not a
	// child of this worker) is checked for exit; 500ms.
	AdoptPollInterval time.Duration
	// LogDrainTimeout bounds the wait for the last output of an exited
	// process before its exit is reported; 2s.
	LogDrainTimeout time.Duration
	// LogSegmentBytes and LogMaxFiles bound each instance's log: at most
	// LogMaxFiles segments of LogSegmentBytes (10 MiB × 5, PyLet's).
	LogSegmentBytes int64
	LogMaxFiles     int
	// LogRetention is how long the log of an instance that no longer runs
	// here is kept after its last write; 72h. Negative keeps logs forever
	// (PyLet never removes them, A12).
	LogRetention time.Duration
	// Shell runs commands ("/bin/bash" when present, else "/bin/sh").
	Shell string
	// StopOnExit stops every local process (SIGTERM, grace, SIGKILL) when
	// Run returns. Without it they keep running and the next start of the
	// worker on this data dir adopts them.
	StopOnExit bool

	// Clock drives timers; clock.Real{} when nil.
	Clock clock.Clock
	// Logger receives the worker's logs; discarded when nil.
	Logger *slog.Logger
	// HTTPClient talks to the head (set its TLS config for https); a plain
	// client when nil. Per-request deadlines come from HeartbeatTimeout.
	HTTPClient *http.Client
	// OnReady is called once the worker is registered and serving logs.
	OnReady func(Info)

	// heads are the parsed HeadURL list (withDefaults).
	heads []string
}

// Info describes a running worker.
type Info struct {
	// WorkerID is the id the head knows this worker by.
	WorkerID string
	// LogAddr is the bound address of the log server.
	LogAddr net.Addr
	// Host is the advertised host.
	Host string
	// Resources are what was registered.
	Resources capacity.Resources
}

// withDefaults returns cfg with defaults applied, or an error naming the
// offending field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.HeadURL == "" {
		return cfg, errors.New("worker config: head URL is required")
	}
	cfg.heads = nil
	for _, h := range strings.Split(cfg.HeadURL, ",") {
		u, err := parseHeadURL(strings.TrimSpace(h))
		if err != nil {
			return cfg, err
		}
		cfg.heads = append(cfg.heads, u.String())
	}
	cfg.HeadURL = cfg.heads[0]
	if cfg.DataDir == "" {
		return cfg, errors.New("worker config: data_dir is required")
	}
	if cfg.Name != "" && !validInstanceID.MatchString(cfg.Name) {
		return cfg, fmt.Errorf("worker config: name %q must be letters, digits, '.', '_' or '-' (at most 253)", cfg.Name)
	}
	if cfg.Resources.Negative() {
		return cfg, fmt.Errorf("worker config: resources %s must not be negative", cfg.Resources)
	}
	if cfg.PortMin == 0 && cfg.PortMax == 0 {
		cfg.PortMin, cfg.PortMax = DefaultPortMin, DefaultPortMax
	}
	if cfg.PortMin < 1 || cfg.PortMax > 65535 || cfg.PortMin > cfg.PortMax {
		return cfg, fmt.Errorf("worker config: port range %d-%d is invalid", cfg.PortMin, cfg.PortMax)
	}
	if cfg.PortLockDir == "" {
		cfg.PortLockDir = DefaultPortLockDir()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.DefaultGracePeriod, DefaultGracePeriod)
	def(&cfg.HeartbeatTimeout, DefaultHeartbeatLimit)
	def(&cfg.RetryMax, 5*time.Second)
	def(&cfg.RetryMin, min(500*time.Millisecond, cfg.RetryMax))
	def(&cfg.AdoptPollInterval, 500*time.Millisecond)
	def(&cfg.LogDrainTimeout, 2*time.Second)
	def(&cfg.LogRetention, 72*time.Hour)
	for name, d := range map[string]time.Duration{"default_grace_period": cfg.DefaultGracePeriod,
		"heartbeat_timeout": cfg.HeartbeatTimeout, "retry_min": cfg.RetryMin, "retry_max": cfg.RetryMax,
		"adopt_poll_interval": cfg.AdoptPollInterval, "log_drain_timeout": cfg.LogDrainTimeout} {
		if d < 0 {
			return cfg, fmt.Errorf("worker config: %s must be positive, got %s", name, d)
		}
	}
	if cfg.RetryMax < cfg.RetryMin {
		return cfg, fmt.Errorf("worker config: retry_max (%s) is below retry_min (%s)", cfg.RetryMax, cfg.RetryMin)
	}
	if cfg.LogSegmentBytes == 0 {
		cfg.LogSegmentBytes = DefaultLogSegment
	}
	if cfg.LogMaxFiles == 0 {
		cfg.LogMaxFiles = DefaultLogFiles
	}
	if cfg.LogSegmentBytes < 0 || cfg.LogMaxFiles < 0 {
		return cfg, errors.New("worker config: log_segment_bytes and log_max_files must be positive")
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
		if _, err := os.Stat("/bin/bash"); err == nil {
			cfg.Shell = "/bin/bash"
		}
	}
	if cfg.Resources.MilliCPU == 0 {
		cfg.Resources.MilliCPU = int64(runtime.NumCPU()) * 1000
	}
	if cfg.Resources.Memory == 0 {
		m, err := memoryTotal()
		if err != nil {
			return cfg, fmt.Errorf("worker config: memory not given and %w", err)
		}
		cfg.Resources.Memory = m
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	return cfg, nil
}

// parseHeadURL accepts "http(s)://host:port[/prefix]" or PyLet's "host:port".
func parseHeadURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("worker config: head URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("worker config: head URL %q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("worker config: head URL %q has no host", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// resolveAdvertise returns the advertised host: AdvertiseAddr, or the local
// address the kernel would use to reach the head.
func resolveAdvertise(advertise, headURL string) (string, error) {
	if advertise != "" {
		if h, _, err := net.SplitHostPort(advertise); err == nil {
			return h, nil
		}
		return strings.Trim(advertise, "[]"), nil
	}
	u, err := parseHeadURL(headURL)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	host := u.Hostname()
	if host == "localhost" {
		return "127.0.0.1", nil
	}
	// A UDP "dial" sends nothing: it only asks the kernel for the route.
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("detect advertise address (route to %s): %w; set --advertise-addr", host, err)
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	return ip.String(), nil
}

// isLoopbackHost reports whether host names this machine only.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// logListenAddr returns the log server's listen address and refuses to
// serve logs beyond loopback without a token, unless insecure.
func logListenAddr(cfg Config, advertised string) (string, error) {
	addr := cfg.LogAddr
	if addr == "" {
		host := ""
		if isLoopbackHost(advertised) {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, strconv.Itoa(DefaultLogPort))
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("worker config: log addr %q: %w", addr, err)
	}
	if cfg.JoinToken == "" && cfg.LogToken == "" && !cfg.Insecure && !isLoopbackHost(host) {
		return "", fmt.Errorf("worker config: serving logs on %q beyond loopback requires a join token (--join-token) or --insecure", addr)
	}
	return addr, nil
}
