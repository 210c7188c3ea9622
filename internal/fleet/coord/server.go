package coord

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleetpb"
)

// Server serves the Fleet API of a coordinator replica: SendNeeds assigns a
// cluster on first contact and forwards its needs to its shard; Status and
// Shortfalls read the shards' reports in etcd.
type Server struct {
	fleetv1.UnimplementedFleetServer
	c *Coordinator

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

var _ fleetv1.FleetServer = (*Server)(nil)

// NewServer returns the Fleet API of c. Close it to drop its connections to
// shards.
func NewServer(c *Coordinator) *Server { return &Server{c: c, conns: map[string]*grpc.ClientConn{}} }

// Close closes the connections to shards.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cc := range s.conns {
		cc.Close()
	}
	clear(s.conns)
}

func (s *Server) shardClient(addr string) (fleetv1.FleetClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cc, ok := s.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return nil, err
		}
		s.conns[addr] = cc
	}
	return fleetv1.NewFleetClient(cc), nil
}

// SendNeeds assigns the cluster on first contact and forwards its needs.
// The assignment stands even when the shard cannot be reached (the error is
// UNAVAILABLE: the cluster retries, or sends to the shard directly).
func (s *Server) SendNeeds(ctx context.Context, req *fleetv1.SendNeedsRequest) (*fleetv1.SendNeedsResponse, error) {
	name := req.GetNeeds().GetCluster()
	if err := etcdstate.ValidClusterName(name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cat, err := s.c.catalog(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if _, err := fleetpb.Needs(cat, 1, req.GetNeeds()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rec, first, err := s.c.AssignCluster(ctx, name)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &fleetv1.SendNeedsResponse{Shard: uint32(rec.Shard), ClusterId: rec.ID, FirstContact: first}
	owners, err := s.c.store.LoadOwners(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	o, live := owners[rec.Shard]
	if !live || o.Address == "" {
		return nil, status.Errorf(codes.Unavailable, "cluster %q is assigned to shard %d, which is not running",
			name, rec.Shard)
	}
	resp.ShardAddress = o.Address
	cl, err := s.shardClient(o.Address)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	sr, err := cl.SendNeeds(ctx, req)
	if err != nil {
		return nil, err
	}
	// What the shard asks of an operator cluster travels back through here too.
	resp.Requests, resp.Machines, resp.Shortfalls = sr.GetRequests(), sr.GetMachines(), sr.GetShortfalls()
	resp.MachinesListed = sr.GetMachinesListed()
	return resp, nil
}

// Status describes this replica and every declared shard, and the clusters
// of the live shards (each asked for its own; a shard that does not answer
// within a second is left out).
func (s *Server) Status(ctx context.Context, _ *fleetv1.StatusRequest) (*fleetv1.StatusResponse, error) {
	st, err := s.c.Status(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	for _, sh := range st.GetShards() {
		if !sh.GetLive() || sh.GetAddress() == "" {
			continue
		}
		cl, err := s.shardClient(sh.GetAddress())
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		ss, err := cl.Status(sctx, &fleetv1.StatusRequest{})
		cancel()
		if err == nil {
			st.Clusters = append(st.Clusters, ss.GetClusters()...)
		}
	}
	return st, nil
}

// Status describes this replica and every declared shard, from etcd.
func (c *Coordinator) Status(ctx context.Context) (*fleetv1.StatusResponse, error) {
	conf, err := c.store.LoadConfig(ctx)
	if err != nil {
		return nil, err
	}
	reports, err := c.store.LoadReports(ctx)
	if err != nil {
		return nil, err
	}
	owners, err := c.store.LoadOwners(ctx)
	if err != nil {
		return nil, err
	}
	clusters, err := c.store.LoadClusters(ctx)
	if err != nil {
		return nil, err
	}
	state, err := c.store.LoadCoord(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	cs := &fleetv1.CoordinatorStatus{Id: c.cfg.ID, Leader: c.leading, Term: c.term, Cycles: c.cycles}
	c.mu.Unlock()
	cs.Clusters = uint32(len(clusters))
	for _, d := range state.Directives {
		if d.State != etcdstate.StateDone {
			cs.DirectivesInFlight++
		}
	}
	if leader, err := c.leaderID(ctx); err == nil {
		cs.LeaderId = leader
	}
	out := &fleetv1.StatusResponse{Role: "coordinator", Coordinator: cs}
	ids := map[uint16]bool{}
	for _, sh := range conf.Shards {
		ids[sh.ID] = true
	}
	for id := range reports {
		ids[id] = true
	}
	perShard := map[uint16]uint32{}
	for _, r := range clusters {
		perShard[r.Shard]++
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		r, ok := reports[id]
		if !ok {
			r = etcdstate.Report{Shard: id}
		}
		o, live := owners[id]
		ss := fleetpb.ShardStatus(&r, live)
		if live {
			ss.Address, ss.Epoch = o.Address, uint64(o.Epoch)
		}
		ss.Clusters = perShard[id]
		out.Shards = append(out.Shards, ss)
	}
	return out, nil
}

func (c *Coordinator) leaderID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
	defer cancel()
	resp, err := c.store.Client().Get(ctx, c.store.ElectionPrefix()+"/", firstCreated()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", errors.New("no leader")
	}
	return string(resp.Kvs[0].Value), nil
}

// Shortfalls lists the shards' shortfalls (from their reports) and the
// directives in flight.
func (s *Server) Shortfalls(ctx context.Context, req *fleetv1.ShortfallsRequest) (*fleetv1.ShortfallsResponse, error) {
	cat, err := s.c.catalog(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	reports, err := s.c.store.LoadReports(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	state, err := s.c.store.LoadCoord(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &fleetv1.ShortfallsResponse{}
	for _, id := range slices.Sorted(maps.Keys(reports)) {
		if req.GetShard() != 0 && uint32(id) != req.GetShard() {
			continue
		}
		r := reports[id]
		for _, sf := range r.Shortfalls {
			p := fleetpb.Shortfall(cat, id, sf, r.EscalateAfter)
			if req.GetEscalatedOnly() && !p.Escalated {
				continue
			}
			out.Shortfalls = append(out.Shortfalls, p)
		}
	}
	slices.SortStableFunc(out.Shortfalls, func(a, b *fleetv1.Shortfall) int { return int(b.Priority) - int(a.Priority) })
	for _, d := range state.Directives {
		if req.GetShard() != 0 && uint32(d.From) != req.GetShard() && uint32(d.To) != req.GetShard() {
			continue
		}
		out.Directives = append(out.Directives, fleetpb.Directive(&d))
	}
	return out, nil
}
