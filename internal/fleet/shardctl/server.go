package shardctl

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleetpb"
)

// Server serves the Fleet API of one shard controller.
type Server struct {
	fleetv1.UnimplementedFleetServer
	c *Controller
}

var _ fleetv1.FleetServer = (*Server)(nil)

// NewServer returns the Fleet API of c.
func NewServer(c *Controller) *Server { return &Server{c: c} }

// SendNeeds accepts the needs of a cluster assigned to this shard.
func (s *Server) SendNeeds(ctx context.Context, req *fleetv1.SendNeedsRequest) (*fleetv1.SendNeedsResponse, error) {
	id, err := s.c.SubmitNeeds(ctx, req.GetNeeds())
	if err != nil {
		return nil, GRPCError(err)
	}
	reqs, machines, listed := s.c.operatorView(id)
	resp := &fleetv1.SendNeedsResponse{Shard: uint32(s.c.cfg.Shard), ShardAddress: s.c.cfg.Address,
		ClusterId: uint32(id), Requests: reqs, Machines: machines, MachinesListed: listed}
	if cat := s.c.Catalog(); cat != nil {
		wanted := map[string]bool{}
		for _, n := range req.GetNeeds().GetNeeds() {
			wanted[n.GetProfile()] = true
		}
		sfs, after := s.c.Shortfalls()
		for _, sf := range sfs {
			if p := fleetpb.Shortfall(cat, uint16(s.c.cfg.Shard), sf, after); wanted[p.GetProfile()] {
				resp.Shortfalls = append(resp.Shortfalls, p)
			}
		}
	}
	return resp, nil
}

// Status describes this shard.
func (s *Server) Status(context.Context, *fleetv1.StatusRequest) (*fleetv1.StatusResponse, error) {
	st := s.c.Status()
	r := etcdstate.Report{Shard: uint16(st.Shard), Epoch: st.Epoch, Address: st.Address, Cycle: st.Cycle,
		Updated: st.Updated, Summary: st.Summary, Clusters: st.Clusters, Paused: st.Paused != "",
		PausedReason: st.Paused}
	return &fleetv1.StatusResponse{Role: "shard",
		Shards:   []*fleetv1.ShardStatus{fleetpb.ShardStatus(&r, st.Started && !st.Deposed)},
		Clusters: s.c.ClusterStatus()}, nil
}

// Shortfalls lists this shard's shortfalls and the directives naming it.
func (s *Server) Shortfalls(_ context.Context, req *fleetv1.ShortfallsRequest) (*fleetv1.ShortfallsResponse, error) {
	me := uint32(s.c.cfg.Shard)
	if req.GetShard() != 0 && req.GetShard() != me {
		return nil, status.Errorf(codes.NotFound, "shard: this is shard %d, not %d", me, req.GetShard())
	}
	cat := s.c.Catalog()
	if cat == nil {
		return nil, GRPCError(ErrNotStarted)
	}
	sfs, after := s.c.Shortfalls()
	out := &fleetv1.ShortfallsResponse{}
	for _, sf := range sfs {
		p := fleetpb.Shortfall(cat, uint16(me), sf, after)
		if req.GetEscalatedOnly() && !p.Escalated {
			continue
		}
		out.Shortfalls = append(out.Shortfalls, p)
	}
	for _, d := range s.c.Status().Directives {
		out.Directives = append(out.Directives, fleetpb.Directive(&d))
	}
	return out, nil
}

// GRPCError maps a controller error to a gRPC status error.
func GRPCError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotAssigned), errors.Is(err, ErrWrongShard):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrNotStarted), errors.Is(err, ErrDeposed), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	var etcdErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &etcdErr) {
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}
