package head

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// The environment variables an instance of a gang gets, so that a
// distributed job can rendezvous: the gang's name and size, the
// instance's rank, and the hosts of all ranks (comma-separated, by rank;
// empty for a rank not placed, as while one restarts).
const (
	EnvGangName  = "TIDE_GANG_NAME"
	EnvGangSize  = "TIDE_GANG_SIZE"
	EnvGangRank  = "TIDE_GANG_RANK"
	EnvGangHosts = "TIDE_GANG_HOSTS"
)

// gangEnvs computes the rendezvous variables of every placed instance of a
// gang: those active in st plus the assignments as just applied.
func gangEnvs(st *store.SchedulingState, applied []store.Assignment) map[string]map[string]string {
	hosts := make(map[string]string, len(st.Workers))
	for _, w := range st.Workers {
		hosts[w.ID] = w.Host
	}
	type member struct {
		si   *store.SchedInstance
		host string
	}
	var gangs map[string][]member
	add := func(si *store.SchedInstance, worker string) {
		if si.GangID == "" {
			return
		}
		if gangs == nil {
			gangs = map[string][]member{}
		}
		gangs[si.GangID] = append(gangs[si.GangID], member{si: si, host: hosts[worker]})
	}
	for i := range st.Active {
		add(&st.Active[i], st.Active[i].Worker)
	}
	if len(applied) > 0 {
		pending := make(map[string]*store.SchedInstance, len(st.Pending))
		for i := range st.Pending {
			pending[st.Pending[i].ID] = &st.Pending[i]
		}
		for _, a := range applied {
			if si := pending[a.InstanceID]; si != nil {
				add(si, a.Worker)
			}
		}
	}
	out := map[string]map[string]string{}
	for _, ms := range gangs {
		size := 0
		for _, m := range ms {
			size = max(size, m.si.GangSize, m.si.GangRank+1)
		}
		byRank := make([]string, size)
		for _, m := range ms {
			byRank[m.si.GangRank] = m.host
		}
		joined := strings.Join(byRank, ",")
		for _, m := range ms {
			out[m.si.ID] = map[string]string{EnvGangName: m.si.GangName, EnvGangSize: strconv.Itoa(m.si.GangSize),
				EnvGangRank: strconv.Itoa(m.si.GangRank), EnvGangHosts: joined}
		}
	}
	return out
}

// withdraw tells the autoscalers of pools that waiting work there was
// given up on (Config.OnWithdraw), each pool once.
func (h *Head) withdraw(pools []string) {
	if h.cfg.OnWithdraw == nil || len(pools) == 0 {
		return
	}
	slices.Sort(pools)
	h.cfg.OnWithdraw(slices.Compact(pools))
}

// setGangEnv replaces the rendezvous variables the desired sets carry.
func (h *Head) setGangEnv(env map[string]map[string]string) {
	h.mu.Lock()
	h.gangEnv = env
	h.mu.Unlock()
}

// withGangEnv adds the rendezvous variables to the desired instances of
// gangs in ds. The scheduling pass computes them when it places a gang;
// a head that has not run a pass since it started (a new leader) reads
// them from the store once.
func (h *Head) withGangEnv(ctx context.Context, ds *store.DesiredState) error {
	var missing bool
	h.mu.Lock()
	for _, d := range ds.Instances {
		if d.GangID != "" && h.gangEnv[d.InstanceID] == nil {
			missing = true
		}
	}
	h.mu.Unlock()
	if missing {
		st, err := h.st.SchedulingState(ctx)
		if err != nil {
			return err
		}
		h.setGangEnv(gangEnvs(st, nil))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range ds.Instances {
		d := &ds.Instances[i]
		extra := h.gangEnv[d.InstanceID]
		if d.GangID == "" || extra == nil {
			continue
		}
		env := make(map[string]string, len(d.Env)+len(extra))
		for k, v := range d.Env {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		d.Env = env
	}
	return nil
}

// ReasonGangTimeout starts the failure reason of the instances of a gang
// not placed within its max_wait.
const ReasonGangTimeout = "GANG_NOT_PLACED"

// expireGangs fails whole every gang none of whose instances is placed
// that has waited its max_wait, with the reason its rank 0 waited for.
// Capacity bought for it is then no longer asked for: its pools are told
// (Config.OnWithdraw), so nodes still booting for it are cancelled, and
// those that joined go as any idle node does.
func (h *Head) expireGangs(ctx context.Context, st *store.SchedulingState, applied []store.Assignment, waiting map[string]string, now time.Time) error {
	type g struct {
		ids    []string
		pools  []string
		name   string
		oldest time.Time
		wait   time.Duration
		why    string
	}
	var gangs map[string]*g
	for i := range st.Pending {
		si := &st.Pending[i]
		if si.GangID == "" || si.GangMaxWait <= 0 {
			continue
		}
		if gangs == nil {
			gangs = map[string]*g{}
		}
		x := gangs[si.GangID]
		if x == nil {
			x = &g{name: si.GangName, oldest: si.QueuedAt, wait: si.GangMaxWait}
			gangs[si.GangID] = x
		}
		x.ids = append(x.ids, si.ID)
		if !slices.Contains(x.pools, si.Pool) {
			x.pools = append(x.pools, si.Pool)
		}
		if si.QueuedAt.Before(x.oldest) {
			x.oldest = si.QueuedAt
		}
		if si.GangRank == 0 || x.why == "" {
			x.why = waiting[si.ID]
		}
	}
	if gangs == nil {
		return nil
	}
	for i := range st.Active {
		delete(gangs, st.Active[i].GangID) // started: a restarting member is not the gang's wait
	}
	if len(applied) > 0 {
		gangOf := make(map[string]string, len(st.Pending))
		for i := range st.Pending {
			gangOf[st.Pending[i].ID] = st.Pending[i].GangID
		}
		for _, a := range applied {
			delete(gangs, gangOf[a.InstanceID]) // placed in this pass
		}
	}
	var errs []error
	var withdrawn []string
	for id, x := range gangs {
		if now.Sub(x.oldest) < x.wait {
			continue
		}
		reason := fmt.Sprintf("%s: gang %s (%d instances) not placed within %s", ReasonGangTimeout, x.name, len(x.ids), x.wait)
		if x.why != "" {
			reason += ": " + x.why
		}
		failed, err := h.st.FailPending(ctx, x.ids, reason, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(failed) > 0 {
			h.log.Info("gang failed whole", "gang", x.name, "id", id, "instances", len(failed), "max_wait", x.wait)
			withdrawn = append(withdrawn, x.pools...)
		}
	}
	h.withdraw(withdrawn)
	if len(errs) > 0 {
		return fmt.Errorf("gang deadlines: %w", errs[0])
	}
	return nil
}
