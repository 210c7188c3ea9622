package fleet

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/transcript"

	"github.com/tide-project/tide/internal/capacity"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt transcripts with the actual output")

// base is time zero of every transcript; commands take t=<duration> after it.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTranscripts runs every testdata/*.txt script. A script is a sequence of
// blocks separated by blank lines; '#' lines are comments:
//
//	<command> [args] [t=<duration since base>]
//	----
//	<output>
//
// Commands (see harness.run): offering, shard, use, add, needs, decide,
// observe, settle, preempt, summary, plan, apply, check. With -rewrite the
// expected output is replaced by the actual one.
func TestTranscripts(t *testing.T) {
	transcript.RunAll(t, "testdata/*.txt", *rewrite, func(t *testing.T) transcript.Runner {
		h := &harness{now: base, shards: map[string]*harnessShard{}}
		return func(cmd string) (string, error) {
			got, err := h.run(cmd)
			if err != nil {
				return "", err
			}
			// Every step keeps the inventory's invariants.
			for _, name := range h.order {
				if err := h.shards[name].s.Check(); err != nil {
					return "", fmt.Errorf("shard %s: %w", name, err)
				}
			}
			return got, nil
		}
	})
}

type harnessShard struct {
	id    ShardID
	s     *Shard
	needs []ClusterCapacityNeeds
	// exportTo queues the shards that the machines this shard drains for
	// the coordinator go to, in order.
	exportTo []string
}

// harness turns transcript commands into calls on shards.
type harness struct {
	now     time.Time
	specs   []OfferingSpec
	cat     *Catalog
	shards  map[string]*harnessShard
	order   []string
	cur     *harnessShard
	plan    Plan
	planCfg CoordinatorConfig
}

func splitArgs(args []string) (map[string]string, []string) {
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	return kv, pos
}

func (h *harness) run(line string) (string, error) {
	fields := strings.Fields(line)
	cmd := fields[0]
	kv, pos := splitArgs(fields[1:])
	if v, ok := kv["t"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", fmt.Errorf("t: %w", err)
		}
		at := base.Add(d)
		if at.Before(h.now) {
			return "", fmt.Errorf("t: %s goes backwards", v)
		}
		h.now = at
		delete(kv, "t")
	}
	switch cmd {
	case "offering":
		return h.offering(kv)
	case "shard":
		return h.newShard(kv, pos)
	case "use":
		if len(pos) != 1 || h.shards[pos[0]] == nil {
			return "", fmt.Errorf("use <shard>: unknown shard %v", pos)
		}
		h.cur = h.shards[pos[0]]
		return "ok", nil
	case "plan":
		return h.planCmd(kv, pos)
	case "apply":
		return h.apply()
	}
	if h.cur == nil {
		return "", fmt.Errorf("no shard: start with shard")
	}
	s := h.cur.s
	switch cmd {
	case "add":
		return h.add(kv, pos)
	case "needs":
		var raw []string
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "t=") {
				raw = append(raw, f)
			}
		}
		return h.needsCmd(raw)
	case "decide":
		acts, err := s.Decide(h.now, h.cur.needs...)
		h.cur.needs = nil
		if err != nil {
			return "error: " + err.Error() + "\n" + s.Describe(), nil
		}
		return h.actions(acts) + s.Describe(), nil
	case "observe":
		if len(pos) != 2 {
			return "", fmt.Errorf("observe <machine> <state> [cluster=] [host=]")
		}
		m, err := parseMachine(pos[0])
		if err != nil {
			return "", err
		}
		st, err := ParseState(pos[1])
		if err != nil {
			return "", err
		}
		o := Observation{Machine: m, State: st, Host: st != Speculative && st != Creating}
		if v, ok := kv["cluster"]; ok {
			c, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return "", fmt.Errorf("cluster: %w", err)
			}
			o.Cluster = ClusterID(c)
		} else if info, ok := s.Machine(m); ok && (st == Configuring || st == Configured || st == Draining) {
			o.Cluster = info.Cluster
		}
		if v, ok := kv["host"]; ok {
			o.Host = v == "true"
		}
		if err := s.Observe(h.now, o); err != nil {
			return "error: " + err.Error() + "\n" + s.Describe(), nil
		}
		return s.Describe(), nil
	case "settle":
		return h.settle(), nil
	case "preempt":
		p, ok := h.cat.Profile(kv["profile"])
		if !ok {
			return "", fmt.Errorf("preempt: unknown profile %q", kv["profile"])
		}
		prio, _ := strconv.Atoi(kv["prio"])
		gap, _ := strconv.Atoi(kv["gap"])
		n, _ := strconv.Atoi(kv["n"])
		acts, err := s.Preempt(h.now, PreemptRequest{Profile: p, Priority: int32(prio), MinGap: int64(gap), Count: n})
		if err != nil {
			return "error: " + err.Error(), nil
		}
		return h.actions(acts) + s.Describe(), nil
	case "summary":
		var wanted []ProfileID
		for _, name := range pos {
			p, ok := h.cat.Profile(name)
			if !ok {
				return "", fmt.Errorf("summary: unknown profile %q", name)
			}
			wanted = append(wanted, p)
		}
		return h.formatSummary(s.Summary(h.cur.id, wanted...)), nil
	case "check":
		if err := s.Check(); err != nil {
			return "error: " + err.Error(), nil
		}
		return "ok", nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

func parseMachine(s string) (MachineID, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "m"), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("machine %q: %w", s, err)
	}
	return MachineID(n), nil
}

// offering name=<type> profile=<p> kind=<k> price=<x> [provider=] [zone=] [prob=] [penalty=]
func (h *harness) offering(kv map[string]string) (string, error) {
	if h.cat != nil {
		return "", fmt.Errorf("offerings come before the first shard")
	}
	f := func(k string) float64 {
		v, _ := strconv.ParseFloat(kv[k], 64)
		return v
	}
	provider := kv["provider"]
	if provider == "" {
		provider = "cloud"
	}
	o := OfferingSpec{Provider: provider, Profile: kv["profile"], Offering: capacity.Offering{Type: kv["type"],
		Zone: kv["zone"], Kind: capacity.Kind(kv["kind"]), Resources: capacity.CPU(1000), PricePerHour: f("price"),
		InterruptionProbability: f("prob"), InterruptionPenalty: f("penalty")}}
	h.specs = append(h.specs, o)
	return fmt.Sprintf("%s/%s provides %s at effective cost %g", provider, o.Offering.Name(), o.Profile,
		o.Offering.EffectiveCost()), nil
}

// shard <name> [release.<kind>=<d>] [escalate=<n>] [max-shortfalls=<n>] [wp= ws= wpen= wrec=]
func (h *harness) newShard(kv map[string]string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", fmt.Errorf("shard <name>")
	}
	if h.cat == nil {
		cat, err := NewCatalog(h.specs)
		if err != nil {
			return "error: " + err.Error(), nil
		}
		h.cat = cat
	}
	var cfg Config
	for k, v := range kv {
		switch {
		case strings.HasPrefix(k, "release."):
			if cfg.ReleaseAfter == nil {
				cfg.ReleaseAfter = map[capacity.Kind]time.Duration{}
			}
			d := Never
			if v != "never" {
				var err error
				if d, err = time.ParseDuration(v); err != nil {
					return "", err
				}
			}
			cfg.ReleaseAfter[capacity.Kind(strings.TrimPrefix(k, "release."))] = d
		case k == "escalate":
			cfg.EscalateAfter, _ = strconv.Atoi(v)
		case k == "max-shortfalls":
			cfg.MaxShortfalls, _ = strconv.Atoi(v)
		case k == "wp" || k == "ws" || k == "wpen" || k == "wrec":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", err
			}
			if cfg.Weights == (Weights{}) {
				cfg.Weights = DefaultWeights
			}
			*map[string]*float64{"wp": &cfg.Weights.Priority, "ws": &cfg.Weights.Drain,
				"wpen": &cfg.Weights.Interruption, "wrec": &cfg.Weights.Reclamation}[k] = x
		default:
			return "", fmt.Errorf("unknown shard option %q", k)
		}
	}
	s, err := NewShard(h.cat, cfg, base)
	if err != nil {
		return "error: " + err.Error(), nil
	}
	hs := &harnessShard{id: ShardID(len(h.order)), s: s}
	h.shards[pos[0]] = hs
	h.order = append(h.order, pos[0])
	h.cur = hs
	return fmt.Sprintf("shard %s is %s", pos[0], hs.id), nil
}

func (h *harness) offeringID(name string, kv map[string]string) (OfferingID, error) {
	provider := kv["provider"]
	if provider == "" {
		provider = "cloud"
	}
	o, ok := h.cat.Offering(provider, name)
	if !ok {
		return 0, fmt.Errorf("unknown offering %s/%s", provider, name)
	}
	return o, nil
}

// add <offering> [n=1] [state=speculative] [rp=0] [cluster=c]
func (h *harness) add(kv map[string]string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", fmt.Errorf("add <offering>")
	}
	o, err := h.offeringID(pos[0], kv)
	if err != nil {
		return "", err
	}
	spec := MachineSpec{Offering: o, State: Speculative}
	if v, ok := kv["state"]; ok {
		if spec.State, err = ParseState(v); err != nil {
			return "", err
		}
	}
	spec.Host = spec.State != Speculative && spec.State != Creating
	if v, ok := kv["rp"]; ok {
		if spec.ReclamationPenalty, err = strconv.ParseFloat(v, 64); err != nil {
			return "", err
		}
	}
	if v, ok := kv["cluster"]; ok {
		c, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return "", err
		}
		spec.Cluster = ClusterID(c)
	}
	n := 1
	if v, ok := kv["n"]; ok {
		if n, err = strconv.Atoi(v); err != nil {
			return "", err
		}
	}
	first, err := h.cur.s.Add(h.now, spec, n)
	if err != nil {
		return "error: " + err.Error(), nil
	}
	return fmt.Sprintf("added %s..%s", first, first+MachineID(n-1)), nil
}

// needs <cluster> [<profile>=<count>@<priority>[,pen=<x>][,drain=<d>][,topo=<t>]]... [release=m<i>,m<j>]
func (h *harness) needsCmd(pos []string) (string, error) {
	if len(pos) < 1 {
		return "", fmt.Errorf("needs <cluster> [profile=count@priority,...]")
	}
	c, err := strconv.ParseUint(pos[0], 10, 32)
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	msg := ClusterCapacityNeeds{Cluster: ClusterID(c)}
	for _, item := range pos[1:] {
		if ids, ok := strings.CutPrefix(item, "release="); ok {
			for _, id := range strings.Split(ids, ",") {
				m, err := strconv.ParseUint(strings.TrimPrefix(id, "m"), 10, 32)
				if err != nil {
					return "", fmt.Errorf("release %q: want m<n>", id)
				}
				msg.Release = append(msg.Release, MachineID(m))
			}
			continue
		}
		parts := strings.Split(item, ",")
		name, rest, ok := strings.Cut(parts[0], "=")
		count, prio, ok2 := strings.Cut(rest, "@")
		if !ok || !ok2 {
			return "", fmt.Errorf("need %q: want profile=count@priority", item)
		}
		p, known := h.cat.Profile(name)
		if !known {
			p = ProfileID(h.cat.Profiles() + 7) // an unknown id, for error transcripts
		}
		n, err := strconv.Atoi(count)
		if err != nil {
			return "", err
		}
		pr, err := strconv.Atoi(prio)
		if err != nil {
			return "", err
		}
		need := Need{Profile: p, Count: int32(n), Priority: int32(pr)}
		for _, opt := range parts[1:] {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "pen":
				if need.InterruptionPenalty, err = strconv.ParseFloat(v, 64); err != nil {
					return "", err
				}
			case "drain":
				if need.DrainTime, err = time.ParseDuration(v); err != nil {
					return "", err
				}
			case "topo":
				need.Topology = v
			default:
				return "", fmt.Errorf("need option %q", k)
			}
		}
		msg.Needs = append(msg.Needs, need)
	}
	h.cur.needs = append(h.cur.needs, msg)
	return fmt.Sprintf("queued %d needs for %s", len(msg.Needs), msg.Cluster), nil
}

// actions formats actions, one "> " line each, and carries out exports: a
// machine exported for a preemption is imported into the shard the plan
// named.
func (h *harness) actions(acts []Action) string {
	var b strings.Builder
	if len(acts) == 0 {
		b.WriteString("> no actions\n")
	}
	for _, a := range acts {
		b.WriteString("> " + h.cat.FormatAction(a))
		if a.Kind == ActExport && len(h.cur.exportTo) > 0 {
			to := h.cur.exportTo[0]
			h.cur.exportTo = h.cur.exportTo[1:]
			ids, err := h.shards[to].s.Import(h.now, []Exported{a.Exported})
			if err != nil {
				fmt.Fprintf(&b, " (import into %s: %v)", to, err)
			} else {
				fmt.Fprintf(&b, " -> %s as %s", to, ids[0])
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// settle plays the provider: every transition in flight finishes.
func (h *harness) settle() string {
	s := h.cur.s
	var obs []Observation
	var lines []string
	for m := range s.Len() {
		info, ok := s.Machine(MachineID(m))
		if !ok {
			continue
		}
		o := Observation{Machine: MachineID(m)}
		switch info.State {
		case Creating, Draining:
			o.State, o.Host = Idle, true
		case Configuring:
			o.State, o.Host, o.Cluster = Configured, true, info.Cluster
		case Deleting:
			o.State = Speculative
		default:
			continue
		}
		obs = append(obs, o)
		lines = append(lines, fmt.Sprintf("> %s %s -> %s", o.Machine, info.State, o.State))
	}
	if err := s.Observe(h.now, obs...); err != nil {
		return "error: " + err.Error()
	}
	if len(lines) == 0 {
		lines = append(lines, "> nothing in flight")
	}
	return strings.Join(lines, "\n") + "\n" + s.Describe()
}

func (h *harness) formatSummary(sum ShardSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s machines=%d configured=%d idle=%d speculative=%d escalated=%d\n", sum.Shard, sum.Machines,
		sum.Configured, sum.Idle, sum.Speculative, sum.Escalated)
	for _, sp := range sum.Spares() {
		floor := "none"
		if sp.Configured > 0 {
			floor = strconv.Itoa(int(sp.Floor))
		}
		fmt.Fprintf(&b, "  %s idle=%d speculative=%d configured=%d floor=%s\n", h.cat.ProfileName(sp.Profile),
			sp.Idle, sp.Speculative, sp.Configured, floor)
	}
	return b.String()
}

func (h *harness) shardName(id ShardID) string { return h.order[id] }

// plan [preempt] [min-gap=<n>] [max-preemptions=<n>]: the coordinator answers
// every shard's escalated shortfalls.
func (h *harness) planCmd(kv map[string]string, pos []string) (string, error) {
	cfg := CoordinatorConfig{Preemption: slices.Contains(pos, "preempt")}
	if v, ok := kv["min-gap"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", err
		}
		cfg.MinPreemptGap = int64(n)
	}
	if v, ok := kv["max-preemptions"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", err
		}
		cfg.MaxPreemptions = n
	}
	var escs []Escalation
	var wanted []ProfileID
	for _, name := range h.order {
		hs := h.shards[name]
		for _, sf := range hs.s.Escalated() {
			escs = append(escs, Escalation{Shard: hs.id, Shortfall: sf})
			if !slices.Contains(wanted, sf.Profile) {
				wanted = append(wanted, sf.Profile)
			}
		}
	}
	var sums []ShardSummary
	for _, name := range h.order {
		hs := h.shards[name]
		sums = append(sums, hs.s.Summary(hs.id, wanted...))
	}
	plan, err := PlanShortfalls(cfg, sums, escs)
	if err != nil {
		return "error: " + err.Error(), nil
	}
	h.plan = plan
	h.planCfg, _ = cfg.Validate()
	var b strings.Builder
	for _, e := range escs {
		fmt.Fprintf(&b, "escalation %s: %s\n", h.shardName(e.Shard), e.Shortfall.format(h.cat))
	}
	for _, d := range plan.Directives {
		fmt.Fprintf(&b, "> %s %s -> %s %s count=%d prio=%d\n", d.Kind, h.shardName(d.From), h.shardName(d.To),
			h.cat.ProfileName(d.Profile), d.Count, d.Priority)
	}
	for _, u := range plan.Unanswered {
		fmt.Fprintf(&b, "unanswered %s: %s (%s)\n", h.shardName(u.Shard), u.Shortfall.format(h.cat), u.Reason)
	}
	if len(plan.Directives) == 0 && len(plan.Unanswered) == 0 {
		b.WriteString("> nothing to do\n")
	}
	return b.String(), nil
}

// apply carries out the last plan the way a driver would.
func (h *harness) apply() (string, error) {
	var b strings.Builder
	for _, d := range h.plan.Directives {
		from, to := h.shards[h.shardName(d.From)], h.shards[h.shardName(d.To)]
		fmt.Fprintf(&b, "%s %s -> %s:\n", d.Kind, h.shardName(d.From), h.shardName(d.To))
		switch d.Kind {
		case ReassignIdle, ReassignQuota:
			st := Idle
			if d.Kind == ReassignQuota {
				st = Speculative
			}
			acts, err := from.s.Export(d.Profile, st, int(d.Count))
			if err != nil {
				return "", err
			}
			for _, a := range acts {
				ids, err := to.s.Import(h.now, []Exported{a.Exported})
				if err != nil {
					return "", err
				}
				fmt.Fprintf(&b, "> %s -> %s as %s\n", h.cat.FormatAction(a), h.shardName(d.To), ids[0])
			}
		case Preempt:
			acts, err := from.s.Preempt(h.now, PreemptRequest{Profile: d.Profile, Priority: d.Priority,
				MinGap: h.planCfg.MinPreemptGap, Count: int(d.Count)})
			if err != nil {
				return "", err
			}
			for range acts {
				from.exportTo = append(from.exportTo, h.shardName(d.To))
			}
			for _, a := range acts {
				fmt.Fprintf(&b, "> %s\n", h.cat.FormatAction(a))
			}
		}
	}
	h.plan = Plan{}
	if b.Len() == 0 {
		return "> nothing to apply", nil
	}
	return b.String(), nil
}
