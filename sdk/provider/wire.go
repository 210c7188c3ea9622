package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tide-project/tide/api/provider/v1"
)

var stateToPB = map[State]pb.State{
	Speculative: pb.State_STATE_SPECULATIVE, Creating: pb.State_STATE_CREATING, Idle: pb.State_STATE_IDLE,
	Configuring: pb.State_STATE_CONFIGURING, Configured: pb.State_STATE_CONFIGURED, Draining: pb.State_STATE_DRAINING,
	Deleting: pb.State_STATE_DELETING, Failed: pb.State_STATE_FAILED,
}

var stateFromPB = func() map[pb.State]State {
	m := make(map[pb.State]State, len(stateToPB))
	for k, v := range stateToPB {
		m[v] = k
	}
	return m
}()

var kindToPB = map[CapacityKind]pb.CapacityKind{
	"": pb.CapacityKind_CAPACITY_KIND_UNSPECIFIED, "on-demand": pb.CapacityKind_CAPACITY_KIND_ON_DEMAND,
	"spot": pb.CapacityKind_CAPACITY_KIND_SPOT, "reserved": pb.CapacityKind_CAPACITY_KIND_RESERVED,
	"bare-metal": pb.CapacityKind_CAPACITY_KIND_BARE_METAL,
}

var kindFromPB = func() map[pb.CapacityKind]CapacityKind {
	m := make(map[pb.CapacityKind]CapacityKind, len(kindToPB))
	for k, v := range kindToPB {
		m[v] = k
	}
	return m
}()

func stateFrom(s pb.State) State {
	if st, ok := stateFromPB[s]; ok {
		return st
	}
	return State(fmt.Sprintf("unknown(%d)", s))
}

func fenceToPB(f Fence) *pb.Fence {
	return &pb.Fence{Controller: f.Controller, Epoch: f.Epoch, Seq: f.Seq}
}

func fenceFrom(f *pb.Fence) Fence {
	return Fence{Controller: f.GetController(), Epoch: f.GetEpoch(), Seq: f.GetSeq()}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// MachineToPB converts a Machine to its wire form.
func MachineToPB(m *Machine) *pb.Machine {
	return &pb.Machine{Id: m.ID, Pool: m.Pool, Offering: m.Offering, State: stateToPB[m.State], Host: m.Host,
		Cluster: m.Cluster, Bootstrap: m.Bootstrap, Labels: m.Labels, CreatedAtUnixNano: unixNano(m.CreatedAt),
		UpdatedAtUnixNano: unixNano(m.UpdatedAt), ReclaimAtUnixNano: unixNano(m.ReclaimAt), Reason: m.Reason}
}

// MachineFromPB converts a wire Machine.
func MachineFromPB(m *pb.Machine) Machine {
	return Machine{ID: m.GetId(), Pool: m.GetPool(), Offering: m.GetOffering(), State: stateFrom(m.GetState()),
		Host: m.GetHost(), Cluster: m.GetCluster(), Bootstrap: m.GetBootstrap(), Labels: m.GetLabels(),
		CreatedAt: fromUnixNano(m.GetCreatedAtUnixNano()), UpdatedAt: fromUnixNano(m.GetUpdatedAtUnixNano()),
		ReclaimAt: fromUnixNano(m.GetReclaimAtUnixNano()), Reason: m.GetReason()}
}

func offeringToPB(o *Offering) *pb.Offering {
	return &pb.Offering{Type: o.Type, Zone: o.Zone, Kind: kindToPB[o.Kind], PricePerHour: o.PricePerHour,
		InterruptionProbability: o.InterruptionProbability, InterruptionPenalty: o.InterruptionPenalty,
		Resources: &pb.Resources{MilliCpu: o.Resources.MilliCPU, MemoryBytes: o.Resources.Memory,
			Gpus: o.Resources.GPUs, Extended: o.Resources.Extended}}
}

func offeringFrom(o *pb.Offering) Offering {
	r := o.GetResources()
	return Offering{Type: o.GetType(), Zone: o.GetZone(), Kind: kindFromPB[o.GetKind()], PricePerHour: o.GetPricePerHour(),
		InterruptionProbability: o.GetInterruptionProbability(), InterruptionPenalty: o.GetInterruptionPenalty(),
		Resources: Resources{MilliCPU: r.GetMilliCpu(), Memory: r.GetMemoryBytes(), GPUs: r.GetGpus(), Extended: r.GetExtended()}}
}

func ackToPB(a Ack) *pb.Ack {
	return &pb.Ack{MachineId: a.MachineID, State: stateToPB[a.State], Replayed: a.Replayed}
}

func ackFrom(a *pb.Ack) Ack {
	return Ack{MachineID: a.GetMachineId(), State: stateFrom(a.GetState()), Replayed: a.GetReplayed()}
}

// ErrorToStatus encodes err as a gRPC status: the code of its kind and an
// ErrorDetail. Context errors become CANCELED or DEADLINE_EXCEEDED; an
// error of no known type becomes UNKNOWN.
func ErrorToStatus(err error) *status.Status {
	if err == nil {
		return nil
	}
	var (
		code codes.Code
		d    = &pb.ErrorDetail{Detail: err.Error()}
	)
	if e, ok := As[*StaleFenceError](err); ok {
		code, d.Kind, d.Pool, d.Got, d.Highest = codes.Aborted, pb.ErrorKind_ERROR_KIND_STALE_FENCE, e.Pool, fenceToPB(e.Got), fenceToPB(e.Highest)
	} else if e, ok := As[*InvalidError](err); ok {
		code, d.Kind, d.Field, d.Detail = codes.InvalidArgument, pb.ErrorKind_ERROR_KIND_INVALID, e.Field, e.Detail
	} else if e, ok := As[*NotFoundError](err); ok {
		code, d.Kind, d.MachineId = codes.NotFound, pb.ErrorKind_ERROR_KIND_NOT_FOUND, e.MachineID
	} else if e, ok := As[*ConflictError](err); ok {
		code, d.Kind, d.MachineId, d.State, d.Detail = codes.FailedPrecondition, pb.ErrorKind_ERROR_KIND_CONFLICT, e.MachineID, stateToPB[e.State], e.Detail
	} else if e, ok := As[*QuotaExceededError](err); ok {
		code, d.Kind, d.Offering, d.Limit, d.Detail = codes.ResourceExhausted, pb.ErrorKind_ERROR_KIND_QUOTA_EXCEEDED, e.Offering, int64(e.Limit), causeText(e.Err)
	} else if e, ok := As[*InsufficientCapacityError](err); ok {
		code, d.Kind, d.Offering, d.Detail = codes.ResourceExhausted, pb.ErrorKind_ERROR_KIND_INSUFFICIENT_CAPACITY, e.Offering, causeText(e.Err)
	} else if e, ok := As[*TransientError](err); ok {
		code, d.Kind, d.RetryAfterMillis, d.Detail = codes.Unavailable, pb.ErrorKind_ERROR_KIND_TRANSIENT, e.RetryAfter.Milliseconds(), causeText(e.Err)
	} else if errors.Is(err, context.Canceled) {
		return status.New(codes.Canceled, err.Error())
	} else if errors.Is(err, context.DeadlineExceeded) {
		return status.New(codes.DeadlineExceeded, err.Error())
	} else {
		return status.New(codes.Unknown, err.Error())
	}
	st, derr := status.New(code, err.Error()).WithDetails(d)
	if derr != nil {
		return status.New(code, err.Error())
	}
	return st
}

func causeText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ErrorFromStatus decodes an error returned by a gRPC call into the typed
// error it stands for. The status code decides the kind; the ErrorDetail,
// when present, fills in the fields. ctx is the call's context: when it is
// done, its error is returned (wrapped with the status) so callers see
// context.Canceled or DeadlineExceeded. Codes of no provider kind
// (UNKNOWN, INTERNAL, UNAUTHENTICATED...) come back as plain errors.
func ErrorFromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%s)", ctx.Err(), st.Message())
	}
	d := &pb.ErrorDetail{}
	for _, x := range st.Details() {
		if v, ok := x.(*pb.ErrorDetail); ok {
			d = v
			break
		}
	}
	// The cause of a quota, capacity or transient error: the detail the
	// plugin gave, or the status message when it sent no ErrorDetail.
	var cause error
	if d.GetKind() == pb.ErrorKind_ERROR_KIND_UNSPECIFIED {
		cause = errors.New(st.Message())
	} else if d.GetDetail() != "" {
		cause = errors.New(d.GetDetail())
	}
	switch st.Code() {
	case codes.InvalidArgument:
		if d.GetField() == "" {
			return NewInvalid("request", st.Message())
		}
		return NewInvalid(d.GetField(), d.GetDetail())
	case codes.NotFound:
		return NewNotFound(d.GetMachineId())
	case codes.FailedPrecondition:
		var s State
		if d.GetState() != pb.State_STATE_UNSPECIFIED {
			s = stateFrom(d.GetState())
		}
		return NewConflict(d.GetMachineId(), s, d.GetDetail())
	case codes.Aborted:
		return NewStaleFence(d.GetPool(), fenceFrom(d.GetGot()), fenceFrom(d.GetHighest()))
	case codes.ResourceExhausted:
		if d.GetKind() == pb.ErrorKind_ERROR_KIND_INSUFFICIENT_CAPACITY {
			return NewInsufficientCapacity(d.GetOffering(), cause)
		}
		return NewQuotaExceeded(d.GetOffering(), int(d.GetLimit()), cause)
	case codes.Unavailable, codes.DeadlineExceeded:
		return NewTransient(cause, time.Duration(d.GetRetryAfterMillis())*time.Millisecond)
	case codes.Canceled:
		return fmt.Errorf("%w (%s)", context.Canceled, st.Message())
	}
	return fmt.Errorf("provider plugin: %s: %s", st.Code(), st.Message())
}
