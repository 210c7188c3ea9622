package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/tide-project/tide/sdk/provider"
)

// SubprocessConfig says which plugin to start and how to supervise it.
type SubprocessConfig struct {
	// Command is the plugin's argv: a path and its arguments.
	Command []string
	// Env is added to the plugin's environment (KEY=VALUE).
	Env []string
	// MinBackoff and MaxBackoff bound the wait before a restart; it doubles
	// after each failed start and is reset once a plugin stays up for
	// 10×MaxBackoff. Defaults 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// StartTimeout bounds the handshake (default 30s).
	StartTimeout time.Duration
	// CallTimeout bounds a call whose context has no deadline (default
	// provider.DefaultCallTimeout).
	CallTimeout time.Duration
	// Logger receives the supervisor's events and the plugin's stderr.
	Logger *slog.Logger
	// Stderr, when set, also receives the plugin's stderr.
	Stderr io.Writer
}

// ErrClosed is returned by calls after Close.
var ErrClosed = errors.New("provider plugin: closed")

// Subprocess is a plugin process that tide starts over go-plugin and keeps
// running: when it exits (a crash, kill -9) it is restarted with backoff.
// Meanwhile calls fail fast with a TransientError and nothing else happens:
// the pool keeps its machines (static stability), and the controller's next
// List after the restart adopts them. Subprocess is an provider.Provider.
type Subprocess struct {
	cfg  SubprocessConfig
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	gp       *goplugin.Client
	client   *provider.Client
	pid      int
	restarts int
	closed   bool
}

// StartSubprocess starts the plugin and waits for its handshake; the first
// start failing is an error (a wrong command should be seen at once).
func StartSubprocess(cfg SubprocessConfig) (*Subprocess, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("provider.options.command: must name the plugin executable")
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Subprocess{cfg: cfg, log: cfg.Logger.With("plugin", cfg.Command[0]), stop: make(chan struct{}), done: make(chan struct{})}
	gp, c, err := s.start()
	if err != nil {
		return nil, err
	}
	s.set(gp, c)
	go s.supervise()
	return s, nil
}

func (s *Subprocess) start() (*goplugin.Client, *provider.Client, error) {
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Env = append(cmd.Environ(), s.cfg.Env...)
	stderr := io.Writer(slogWriter{s.log})
	if s.cfg.Stderr != nil {
		stderr = io.MultiWriter(stderr, s.cfg.Stderr)
	}
	gp := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  provider.Handshake,
		Plugins:          goplugin.PluginSet{provider.PluginName: &provider.GRPCPlugin{CallTimeout: s.cfg.CallTimeout}},
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     s.cfg.StartTimeout,
		GRPCDialOptions:  []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(provider.MaxMessageSize))},
		Stderr:           stderr,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off}),
	})
	rpc, err := gp.Client()
	if err != nil {
		gp.Kill()
		return nil, nil, fmt.Errorf("provider plugin %s: start: %w", s.cfg.Command[0], err)
	}
	raw, err := rpc.Dispense(provider.PluginName)
	if err != nil {
		gp.Kill()
		return nil, nil, fmt.Errorf("provider plugin %s: %w", s.cfg.Command[0], err)
	}
	c := raw.(*provider.Client)
	name, version, _ := c.Info()
	s.log.Info("provider plugin started", "name", name, "version", version, "pid", pidOf(gp))
	return gp, c, nil
}

func pidOf(gp *goplugin.Client) int {
	if rc := gp.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

func (s *Subprocess) set(gp *goplugin.Client, c *provider.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gp, s.client, s.pid = gp, c, 0
	if gp != nil {
		s.pid = pidOf(gp)
	}
}

// supervise restarts the plugin whenever it exits, until Close.
func (s *Subprocess) supervise() {
	defer close(s.done)
	backoff := s.cfg.MinBackoff
	started := time.Now()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-poll.C:
		}
		s.mu.Lock()
		gp := s.gp
		s.mu.Unlock()
		if gp != nil && !gp.Exited() {
			continue
		}
		if gp != nil {
			s.log.Warn("provider plugin exited; restarting", "backoff", backoff)
			gp.Kill()
			s.set(nil, nil)
			if time.Since(started) > 10*s.cfg.MaxBackoff {
				backoff = s.cfg.MinBackoff
			}
		}
		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		ngp, c, err := s.start()
		if err != nil {
			s.log.Error("provider plugin restart failed", "err", err)
			backoff = min(2*backoff, s.cfg.MaxBackoff)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			ngp.Kill()
			return
		}
		s.gp, s.client, s.pid = ngp, c, pidOf(ngp)
		s.restarts++
		s.mu.Unlock()
		started = time.Now()
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// Pid returns the plugin's process id; 0 while it is being restarted.
func (s *Subprocess) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Restarts returns how many times the plugin was restarted.
func (s *Subprocess) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Close stops supervising and stops the plugin (gracefully, then killed).
func (s *Subprocess) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	gp := s.gp
	s.gp, s.client = nil, nil
	s.mu.Unlock()
	if gp != nil {
		gp.Kill()
	}
	return nil
}

func (s *Subprocess) current() (*provider.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.client == nil {
		return nil, provider.NewTransient(errors.New("provider plugin is restarting"), s.cfg.MinBackoff)
	}
	return s.client, nil
}

func call[T any](s *Subprocess, fn func(c *provider.Client) (T, error)) (T, error) {
	c, err := s.current()
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(c)
}

// Offerings implements provider.Provider.
func (s *Subprocess) Offerings(ctx context.Context) ([]provider.Offering, error) {
	return call(s, func(c *provider.Client) ([]provider.Offering, error) { return c.Offerings(ctx) })
}

// Create implements provider.Provider.
func (s *Subprocess) Create(ctx context.Context, r provider.CreateRequest) (provider.Ack, error) {
	return call(s, func(c *provider.Client) (provider.Ack, error) { return c.Create(ctx, r) })
}

// Configure implements provider.Provider.
func (s *Subprocess) Configure(ctx context.Context, r provider.ConfigureRequest) (provider.Ack, error) {
	return call(s, func(c *provider.Client) (provider.Ack, error) { return c.Configure(ctx, r) })
}

// Drain implements provider.Provider.
func (s *Subprocess) Drain(ctx context.Context, r provider.DrainRequest) (provider.Ack, error) {
	return call(s, func(c *provider.Client) (provider.Ack, error) { return c.Drain(ctx, r) })
}

// Delete implements provider.Provider.
func (s *Subprocess) Delete(ctx context.Context, r provider.DeleteRequest) (provider.Ack, error) {
	return call(s, func(c *provider.Client) (provider.Ack, error) { return c.Delete(ctx, r) })
}

// Get implements provider.Provider.
func (s *Subprocess) Get(ctx context.Context, id string) (provider.Machine, error) {
	return call(s, func(c *provider.Client) (provider.Machine, error) { return c.Get(ctx, id) })
}

// List implements provider.Provider.
func (s *Subprocess) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	return call(s, func(c *provider.Client) ([]provider.Machine, error) { return c.List(ctx, f) })
}

// slogWriter logs each write (a line of the plugin's stderr) at Info.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(b []byte) (int, error) {
	w.log.Info("plugin stderr", "line", string(b))
	return len(b), nil
}

// Info returns what the running plugin said in its handshake (empty while
// it is being restarted).
func (s *Subprocess) Info() (name, version string, capabilities []string) {
	c, err := s.current()
	if err != nil {
		return "", "", nil
	}
	return c.Info()
}

// Shutdown stops the plugin for good, letting it clean up: supervision
// ends, the plugin gets SIGTERM and until ctx is done to exit (a plugin
// that started processes stops them then), and is killed after that.
func (s *Subprocess) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	gp, pid := s.gp, s.pid
	s.gp, s.client = nil, nil
	s.mu.Unlock()
	if gp == nil {
		return nil
	}
	defer gp.Kill()
	if pid <= 0 || syscall.Kill(pid, syscall.SIGTERM) != nil {
		return nil
	}
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !gp.Exited() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("provider plugin %s did not exit after SIGTERM: killed", s.cfg.Command[0])
		case <-poll.C:
		}
	}
	return nil
}
