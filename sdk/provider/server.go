package provider

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"reflect"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	pb "github.com/tide-project/tide/api/provider/v1"
)

// The protocol version this SDK speaks (api/provider/v1).
const (
	ProtocolMajor = 1
	ProtocolMinor = 0
)

// CapabilityWatch is the Info capability of a plugin that serves Watch.
const CapabilityWatch = "watch"

// Info describes a plugin in the Info handshake.
type Info struct {
	// Name of the plugin, e.g. "sim".
	Name string
	// Version of the plugin itself.
	Version string
}

// ServerOption configures NewServer.
type ServerOption func(*server)

// WithInfo sets the name and version the plugin reports in Info.
func WithInfo(i Info) ServerOption { return func(s *server) { s.info = i } }

// WithWatchInterval sets how often Watch polls List for changes when the
// Provider has no change feed of its own (default 200ms).
func WithWatchInterval(d time.Duration) ServerOption { return func(s *server) { s.watchEvery = d } }

// NewServer returns the gRPC service that serves p.
func NewServer(p Provider, opts ...ServerOption) pb.ProviderServer {
	s := &server{p: p, info: Info{Name: "plugin", Version: "0"}, watchEvery: 200 * time.Millisecond}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register registers p's service on a gRPC server.
func Register(g *grpc.Server, p Provider, opts ...ServerOption) {
	pb.RegisterProviderServer(g, NewServer(p, opts...))
}

type server struct {
	pb.UnimplementedProviderServer
	p          Provider
	info       Info
	watchEvery time.Duration
}

func wireErr(err error) error {
	if err == nil {
		return nil
	}
	return ErrorToStatus(err).Err()
}

func (s *server) Info(_ context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	return &pb.InfoResponse{Name: s.info.Name, Version: s.info.Version,
		Protocol: &pb.ProtocolVersion{Major: ProtocolMajor, Minor: ProtocolMinor}, Capabilities: []string{CapabilityWatch}}, nil
}

func (s *server) Offerings(ctx context.Context, _ *pb.OfferingsRequest) (*pb.OfferingsResponse, error) {
	offs, err := s.p.Offerings(ctx)
	if err != nil {
		return nil, wireErr(err)
	}
	out := &pb.OfferingsResponse{Offerings: make([]*pb.Offering, len(offs))}
	for i := range offs {
		out.Offerings[i] = offeringToPB(&offs[i])
	}
	return out, nil
}

func ack(a Ack, err error) (*pb.Ack, error) {
	if err != nil {
		return nil, wireErr(err)
	}
	return ackToPB(a), nil
}

func (s *server) Create(ctx context.Context, r *pb.CreateRequest) (*pb.Ack, error) {
	return ack(s.p.Create(ctx, CreateRequest{Fence: fenceFrom(r.GetFence()), Pool: r.GetPool(), MachineID: r.GetMachineId(),
		Offering: r.GetOffering(), Labels: r.GetLabels(), Bootstrap: r.GetBootstrap()}))
}

func (s *server) Configure(ctx context.Context, r *pb.ConfigureRequest) (*pb.Ack, error) {
	return ack(s.p.Configure(ctx, ConfigureRequest{Fence: fenceFrom(r.GetFence()), Pool: r.GetPool(), MachineID: r.GetMachineId(),
		Cluster: r.GetCluster(), Bootstrap: r.GetBootstrap()}))
}

func (s *server) Drain(ctx context.Context, r *pb.DrainRequest) (*pb.Ack, error) {
	return ack(s.p.Drain(ctx, DrainRequest{Fence: fenceFrom(r.GetFence()), Pool: r.GetPool(), MachineID: r.GetMachineId()}))
}

func (s *server) Delete(ctx context.Context, r *pb.DeleteRequest) (*pb.Ack, error) {
	return ack(s.p.Delete(ctx, DeleteRequest{Fence: fenceFrom(r.GetFence()), Pool: r.GetPool(), MachineID: r.GetMachineId()}))
}

func (s *server) Get(ctx context.Context, r *pb.GetRequest) (*pb.Machine, error) {
	m, err := s.p.Get(ctx, r.GetMachineId())
	if err != nil {
		return nil, wireErr(err)
	}
	return MachineToPB(&m), nil
}

func filterFrom(r *pb.ListRequest) (Filter, error) {
	f := Filter{Pool: r.GetPool()}
	for _, st := range r.GetStates() {
		s, ok := stateFromPB[st]
		if !ok {
			return f, NewInvalid("states", fmt.Sprintf("unknown state %d", st))
		}
		f.States = append(f.States, s)
	}
	return f, nil
}

func (s *server) List(ctx context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	f, err := filterFrom(r)
	if err != nil {
		return nil, wireErr(err)
	}
	ms, err := s.p.List(ctx, f)
	if err != nil {
		return nil, wireErr(err)
	}
	out := &pb.ListResponse{Machines: make([]*pb.Machine, len(ms))}
	for i := range ms {
		out.Machines[i] = MachineToPB(&ms[i])
	}
	return out, nil
}

// Watch sends a snapshot of the pool, then polls List and sends every
// machine whose observation changed, and every machine that disappeared.
func (s *server) Watch(r *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchEvent]) error {
	ctx := stream.Context()
	last := map[string]Machine{}
	tick := time.NewTicker(s.watchEvery)
	defer tick.Stop()
	for first := true; ; first = false {
		ms, err := s.p.List(ctx, Filter{Pool: r.GetPool()})
		if err != nil {
			return wireErr(err)
		}
		seen := make(map[string]bool, len(ms))
		for i := range ms {
			m := &ms[i]
			seen[m.ID] = true
			if old, ok := last[m.ID]; ok && reflect.DeepEqual(old, *m) {
				continue
			}
			last[m.ID] = *m
			if err := stream.Send(&pb.WatchEvent{Machine: MachineToPB(m)}); err != nil {
				return err
			}
		}
		for id, m := range last {
			if !seen[id] {
				delete(last, id)
				if err := stream.Send(&pb.WatchEvent{Machine: MachineToPB(&m), Gone: true}); err != nil {
					return err
				}
			}
		}
		if first {
			if err := stream.Send(&pb.WatchEvent{SnapshotDone: true}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// RemoteConfig is how a remote plugin authenticates callers: mutual TLS,
// a bearer token, or both.
type RemoteConfig struct {
	// TLS, when set, serves over TLS; set ClientAuth and ClientCAs to
	// require client certificates (mutual TLS).
	TLS *tls.Config
	// Token, when set, is the bearer token every call must carry in its
	// "authorization: Bearer <token>" metadata. It is checked when a
	// call's headers arrive, before its message is read.
	Token string
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface; 10 s when zero (gRPC's own default is 120 s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has had no call in progress
	// for this long (a client reconnects when it calls again); 5 min when
	// zero (gRPC's own default never closes one).
	IdleTimeout time.Duration
}

// MaxRequestSize bounds a request a remote plugin accepts: gRPC's default,
// stated. A larger one is refused with ResourceExhausted.
const MaxRequestSize = 4 << 20

// NewGRPCServer returns a gRPC server for a remote plugin: TLS and token
// checks per cfg, keepalive enforcement that admits tide's pings, and
// bounds on what a caller can hold: requests of at most MaxRequestSize,
// the handshake and idle timeouts of cfg, and a call without the token
// refused when its headers arrive, so it never holds a goroutine while it
// sends (or never finishes sending) its message.
func NewGRPCServer(cfg RemoteConfig) *grpc.Server {
	handshake, idle := cfg.HandshakeTimeout, cfg.IdleTimeout
	if handshake <= 0 {
		handshake = 10 * time.Second
	}
	if idle <= 0 {
		idle = 5 * time.Minute
	}
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: idle}),
		grpc.ConnectionTimeout(handshake),
		grpc.MaxRecvMsgSize(MaxRequestSize),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			return ctx, tokenIn(info.Header, cfg.Token)
		}))
		// The interceptors check again: a server built with other options
		// keeps the check.
		opts = append(opts, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := checkToken(ctx, cfg.Token); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := checkToken(ss.Context(), cfg.Token); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	}
	return grpc.NewServer(opts...)
}

func checkToken(ctx context.Context, want string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	return tokenIn(md, want)
}

func tokenIn(md metadata.MD, want string) error {
	for _, v := range md.Get("authorization") {
		got, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong bearer token")
}

// ListenAndServe serves p as a remote plugin on addr until ctx is done.
// ready, when not nil, receives the listening address once it listens.
func ListenAndServe(ctx context.Context, p Provider, addr string, cfg RemoteConfig, ready func(net.Addr), opts ...ServerOption) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := NewGRPCServer(cfg)
	Register(g, p, opts...)
	if ready != nil {
		ready(lis.Addr())
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			g.Stop()
		case <-done:
		}
	}()
	err = g.Serve(lis)
	close(done)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
