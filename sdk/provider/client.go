package provider

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/tide-project/tide/api/provider/v1"
)

// MaxMessageSize bounds a response tide accepts (a List of about a million
// machines); gRPC's default of 4 MiB would stop near 40,000.
const MaxMessageSize = 256 << 20

// DefaultCallTimeout bounds a call whose context has no deadline.
const DefaultCallTimeout = 10 * time.Second

// Client calls a provider plugin over gRPC. It is a Provider: typed errors
// returned by the plugin come back as the same types.
type Client struct {
	rpc         pb.ProviderClient
	conn        *grpc.ClientConn
	callTimeout time.Duration
	info        *pb.InfoResponse
}

// NewClient returns a Client over conn (which the caller keeps owning)
// after the Info handshake: it fails when the plugin speaks a protocol
// major version other than ProtocolMajor. callTimeout bounds every call
// whose context has no deadline (0: DefaultCallTimeout).
func NewClient(ctx context.Context, conn grpc.ClientConnInterface, callTimeout time.Duration) (*Client, error) {
	c := &Client{rpc: pb.NewProviderClient(conn), callTimeout: cmpDur(callTimeout, DefaultCallTimeout)}
	if cc, ok := conn.(*grpc.ClientConn); ok {
		c.conn = cc
	}
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	info, err := c.rpc.Info(ctx, &pb.InfoRequest{Protocol: &pb.ProtocolVersion{Major: ProtocolMajor, Minor: ProtocolMinor}})
	if err != nil {
		return nil, fmt.Errorf("provider plugin handshake (Info): %w", ErrorFromStatus(ctx, err))
	}
	if err := CheckProtocol(info); err != nil {
		return nil, err
	}
	c.info = info
	return c, nil
}

// CheckProtocol refuses a plugin whose Info names a protocol major version
// this SDK does not speak.
func CheckProtocol(info *pb.InfoResponse) error {
	if v := info.GetProtocol(); v.GetMajor() != ProtocolMajor {
		return fmt.Errorf("provider plugin %q (version %q) speaks provider protocol v%d.%d; this tide speaks v%d.%d: use a plugin built for protocol v%d",
			info.GetName(), info.GetVersion(), v.GetMajor(), v.GetMinor(), ProtocolMajor, ProtocolMinor, ProtocolMajor)
	}
	return nil
}

// Info returns what the plugin said in the handshake.
func (c *Client) Info() (name, version string, capabilities []string) {
	return c.info.GetName(), c.info.GetVersion(), c.info.GetCapabilities()
}

// Close closes the connection when the Client dialed it.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (c *Client) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.callTimeout)
}

// Offerings implements Provider.
func (c *Client) Offerings(ctx context.Context) ([]Offering, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	r, err := c.rpc.Offerings(ctx, &pb.OfferingsRequest{})
	if err != nil {
		return nil, ErrorFromStatus(ctx, err)
	}
	out := make([]Offering, len(r.GetOfferings()))
	for i, o := range r.GetOfferings() {
		out[i] = offeringFrom(o)
	}
	return out, nil
}

func (c *Client) ack(ctx context.Context, cancel context.CancelFunc, a *pb.Ack, err error) (Ack, error) {
	defer cancel()
	if err != nil {
		return Ack{}, ErrorFromStatus(ctx, err)
	}
	if _, ok := stateFromPB[a.GetState()]; !ok {
		return Ack{}, badReply("ack.state", fmt.Sprintf("unknown state %d", a.GetState()))
	}
	return ackFrom(a), nil
}

// ReplyError is a plugin reply that breaks the protocol (an unknown state,
// a machine without an id). Field names the bad field of the reply.
type ReplyError struct {
	Field  string
	Detail string
}

// Error describes the bad reply.
func (e *ReplyError) Error() string { return "provider plugin reply: " + e.Field + ": " + e.Detail }

func badReply(field, detail string) error { return &ReplyError{Field: field, Detail: detail} }

// checkMachine checks one machine of a reply; field prefixes its errors.
func checkMachine(field string, m *pb.Machine) error {
	if m.GetId() == "" {
		return badReply(field+".id", "must be set")
	}
	if _, ok := stateFromPB[m.GetState()]; !ok {
		return badReply(field+".state", fmt.Sprintf("machine %q: unknown state %d", m.GetId(), m.GetState()))
	}
	return nil
}

// Create implements Provider.
func (c *Client) Create(ctx context.Context, r CreateRequest) (Ack, error) {
	ctx, cancel := c.deadline(ctx)
	a, err := c.rpc.Create(ctx, &pb.CreateRequest{Fence: fenceToPB(r.Fence), Pool: r.Pool, MachineId: r.MachineID,
		Offering: r.Offering, Labels: r.Labels, IdempotencyKey: r.MachineID + "/idle", Bootstrap: r.Bootstrap})
	return c.ack(ctx, cancel, a, err)
}

// Configure implements Provider.
func (c *Client) Configure(ctx context.Context, r ConfigureRequest) (Ack, error) {
	ctx, cancel := c.deadline(ctx)
	a, err := c.rpc.Configure(ctx, &pb.ConfigureRequest{Fence: fenceToPB(r.Fence), Pool: r.Pool, MachineId: r.MachineID,
		Cluster: r.Cluster, Bootstrap: r.Bootstrap, IdempotencyKey: r.MachineID + "/configured/" + r.Cluster})
	return c.ack(ctx, cancel, a, err)
}

// Drain implements Provider.
func (c *Client) Drain(ctx context.Context, r DrainRequest) (Ack, error) {
	ctx, cancel := c.deadline(ctx)
	a, err := c.rpc.Drain(ctx, &pb.DrainRequest{Fence: fenceToPB(r.Fence), Pool: r.Pool, MachineId: r.MachineID,
		IdempotencyKey: r.MachineID + "/idle"})
	return c.ack(ctx, cancel, a, err)
}

// Delete implements Provider.
func (c *Client) Delete(ctx context.Context, r DeleteRequest) (Ack, error) {
	ctx, cancel := c.deadline(ctx)
	a, err := c.rpc.Delete(ctx, &pb.DeleteRequest{Fence: fenceToPB(r.Fence), Pool: r.Pool, MachineId: r.MachineID,
		IdempotencyKey: r.MachineID + "/gone"})
	return c.ack(ctx, cancel, a, err)
}

// Get implements Provider.
func (c *Client) Get(ctx context.Context, id string) (Machine, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	m, err := c.rpc.Get(ctx, &pb.GetRequest{MachineId: id})
	if err != nil {
		return Machine{}, ErrorFromStatus(ctx, err)
	}
	if err := checkMachine("machine", m); err != nil {
		return Machine{}, err
	}
	return MachineFromPB(m), nil
}

// List implements Provider.
func (c *Client) List(ctx context.Context, f Filter) ([]Machine, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	req := &pb.ListRequest{Pool: f.Pool}
	for _, s := range f.States {
		st, ok := stateToPB[s]
		if !ok {
			return nil, NewInvalid("states", fmt.Sprintf("unknown state %q", s))
		}
		req.States = append(req.States, st)
	}
	r, err := c.rpc.List(ctx, req)
	if err != nil {
		return nil, ErrorFromStatus(ctx, err)
	}
	out := make([]Machine, len(r.GetMachines()))
	for i, m := range r.GetMachines() {
		if err := checkMachine(fmt.Sprintf("machines[%d]", i), m); err != nil {
			return nil, err
		}
		out[i] = MachineFromPB(m)
	}
	return out, nil
}

// Change is one event of Watch: a machine's new observation, or its last
// one with Gone set.
type Change struct {
	Machine Machine
	Gone    bool
}

// Watch streams the pool's machine changes (a snapshot first) to fn until
// ctx is done or the stream breaks; it returns nil when ctx ends it. After a
// broken stream, List is the source of truth.
func (c *Client) Watch(ctx context.Context, pool string, fn func(Change)) error {
	stream, err := c.rpc.Watch(ctx, &pb.WatchRequest{Pool: pool})
	if err != nil {
		return ErrorFromStatus(ctx, err)
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return ErrorFromStatus(ctx, err)
		}
		if ev.GetSnapshotDone() {
			continue
		}
		fn(Change{Machine: MachineFromPB(ev.GetMachine()), Gone: ev.GetGone()})
	}
}

// DialConfig is how Dial reaches a remote plugin.
type DialConfig struct {
	// TLS, when set, dials over TLS (with Certificates set: mutual TLS).
	TLS *tls.Config
	// Token, when set, is sent as "authorization: Bearer <token>" on every
	// call. Without TLS it is sent in clear: only on loopback or a trusted
	// network.
	Token string
	// CallTimeout bounds each call whose context has no deadline
	// (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// KeepaliveTime is the ping interval on an idle connection (0: 10s);
	// a peer that does not answer within as long is declared dead and the
	// connection is re-dialed.
	KeepaliveTime time.Duration
	// MaxReconnectDelay caps the wait between re-dials of a lost
	// connection (0: 5s), so a plugin that comes back is used again soon.
	MaxReconnectDelay time.Duration
}

type tokenCreds struct {
	token  string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }

// Dial connects to a remote plugin at addr and does the Info handshake.
// gRPC re-dials by itself after a broken connection; calls made meanwhile
// fail fast with a TransientError.
func Dial(ctx context.Context, addr string, cfg DialConfig) (*Client, error) {
	ka := cmpDur(cfg.KeepaliveTime, 10*time.Second)
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ka, Timeout: ka, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond,
			Multiplier: 1.6, Jitter: 0.2, MaxDelay: cmpDur(cfg.MaxReconnectDelay, 5*time.Second)}, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: cfg.Token, secure: cfg.TLS != nil}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("provider plugin %s: %w", addr, err)
	}
	c, err := NewClient(ctx, conn, cfg.CallTimeout)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("provider plugin %s: %w", addr, err)
	}
	return c, nil
}
