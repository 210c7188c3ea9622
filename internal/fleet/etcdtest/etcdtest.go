// Package etcdtest runs a real, embedded, single-member etcd server for
// tests (go.etcd.io/etcd/server/v3/embed): on loopback, on free ports, in a
// temporary directory, with short heartbeat and election timeouts so leases
// as short as one second work. Tests use it to run the fleet's coordinator
// and shard controllers against etcd itself, including its outages
// (Stop, then Restart on the same data and ports).
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// readyTimeout bounds a server start.
const readyTimeout = 20 * time.Second

// Server is one embedded etcd member.
type Server struct {
	tb       testing.TB
	dir      string
	data     string
	client   url.URL
	peer     url.URL
	mu       sync.Mutex
	e        *embed.Etcd
	clients  []*clientv3.Client
	endpoint string
}

// Start starts a server and stops it when the test ends. It fails the test
// if etcd does not become ready within 20 seconds.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, dir: tb.TempDir()}
	s.data = filepath.Join(s.dir, "data")
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var cp, pp int
		if cp, err = freePort(); err != nil {
			continue
		}
		if pp, err = freePort(); err != nil {
			continue
		}
		s.client = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)}
		s.peer = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("etcdtest: start embedded etcd: %v", err)
	}
	s.endpoint = s.client.String()
	tb.Cleanup(s.cleanup)
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.data
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.Name + "=" + s.peer.String()
	cfg.TickMs, cfg.ElectionMs = 10, 100
	// Errors go to a file beside the data: v3.6 logs harmless errors on
	// every Close ("setting up serving from embedded etcd failed").
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(s.dir, "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return err
	case <-time.After(readyTimeout):
		e.Close()
		return fmt.Errorf("not ready after %s", readyTimeout)
	}
	s.mu.Lock()
	s.e = e
	s.mu.Unlock()
	return nil
}

// Endpoint returns the client URL, e.g. "http://127.0.0.1:41234".
func (s *Server) Endpoint() string { return s.endpoint }

// Client returns a new client of the server, closed when the test ends (or
// earlier by the test, to simulate a crash of its user: a client closed
// without revoking its leases leaves them to expire).
func (s *Server) Client() *clientv3.Client {
	s.tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.endpoint},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		// Reconnect quickly after Restart (gRPC's default backoff grows to
		// minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		s.tb.Fatalf("etcdtest: client: %v", err)
	}
	s.mu.Lock()
	s.clients = append(s.clients, cli)
	s.mu.Unlock()
	return cli
}

// Stop stops the server (an outage); its data stays for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	e := s.e
	s.e = nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart starts the stopped server again on the same data and ports.
func (s *Server) Restart() {
	s.tb.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the ports may linger for a moment
	}
	s.tb.Fatalf("etcdtest: restart: %v", err)
}

// WaitReady waits until a client request succeeds.
func (s *Server) WaitReady(ctx context.Context, cli *clientv3.Client) error {
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(c, "etcdtest-ready")
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("etcd not ready: %w", err)
		}
	}
}

// cleanup closes the clients first (a client with a live session makes
// Close wait for seconds), then the server.
func (s *Server) cleanup() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	s.Stop()
}
