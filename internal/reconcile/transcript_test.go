package reconcile

import (
	"encoding/json"
	"flag"
	"fmt"
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
//	> <action> (one line per action, or "> no actions")
//	<Describe() output>
//
// Commands: new nodes=<spec> [protect-first] [delay=<d>] | desired <n>
// [reason=<word>] | bounds nodes=<spec> or min= [desired=] [max=] | tick |
// provisioned [ids] | provision-failed <text> | joined|lost|busy|idle|drained
// <id> | adopt [current=a,b] [pending=..] [busy=..].
// With -rewrite the expected output is replaced by the actual one.
func TestTranscripts(t *testing.T) {
	transcript.RunAll(t, "testdata/*.txt", *rewrite, func(*testing.T) transcript.Runner {
		h := &harness{now: base}
		return h.run
	})
}

// harness turns transcript commands into events.
type harness struct {
	p   *Pool
	now time.Time
}

func (h *harness) run(line string) (string, error) {
	fields := strings.Fields(line)
	cmd, args := fields[0], fields[1:]
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
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
	if cmd == "new" {
		return h.newPool(kv, pos)
	}
	if h.p == nil {
		return "", fmt.Errorf("no pool: start with new")
	}
	ev, err := parseEvent(cmd, kv, pos)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	acts := h.p.Step(h.now, ev)
	if len(acts) == 0 {
		b.WriteString("> no actions\n")
	}
	for _, a := range acts {
		b.WriteString("> " + a.String() + "\n")
	}
	b.WriteString(h.p.Describe())
	return b.String(), nil
}

func (h *harness) newPool(kv map[string]string, pos []string) (string, error) {
	var cfg Config
	spec, err := parseSpec(kv)
	if err != nil {
		return "", err
	}
	cfg.Nodes = spec
	if v, ok := kv["delay"]; ok {
		if cfg.ScaleDownDelay, err = time.ParseDuration(v); err != nil {
			return "", fmt.Errorf("delay: %w", err)
		}
	}
	for _, p := range pos {
		if p != "protect-first" {
			return "", fmt.Errorf("unknown flag %q", p)
		}
		cfg.ProtectFirstNode = true
	}
	p, err := New(cfg)
	if err != nil {
		h.p = nil
		return "error: " + oneLine(err), nil
	}
	h.p = p
	return p.Describe(), nil
}

// parseSpec reads nodes=<json form> (validated) or min=/desired=/max= (not
// validated, so transcripts can send invalid bounds).
func parseSpec(kv map[string]string) (capacity.NodeSpec, error) {
	var s capacity.NodeSpec
	if v, ok := kv["nodes"]; ok {
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			return s, fmt.Errorf("nodes: %w", err)
		}
		return s, nil
	}
	num := func(k string, def int) (int, error) {
		v, ok := kv[k]
		if !ok {
			return def, nil
		}
		return strconv.Atoi(v)
	}
	var err error
	if s.Min, err = num("min", 0); err != nil {
		return s, err
	}
	if s.Desired, err = num("desired", s.Min); err != nil {
		return s, err
	}
	_, s.Elastic = kv["max"]
	if s.Max, err = num("max", s.Min); err != nil {
		return s, err
	}
	return s, nil
}

func parseIDs(list []string) ([]NodeID, error) {
	var ids []NodeID
	for _, item := range list {
		for f := range strings.SplitSeq(item, ",") {
			if f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("node id %q: %w", f, err)
			}
			ids = append(ids, NodeID(n))
		}
	}
	return ids, nil
}

func parseEvent(cmd string, kv map[string]string, pos []string) (Event, error) {
	oneID := func() (NodeID, error) {
		ids, err := parseIDs(pos)
		if err != nil {
			return 0, err
		}
		if len(ids) != 1 {
			return 0, fmt.Errorf("%s takes one node id", cmd)
		}
		return ids[0], nil
	}
	switch cmd {
	case "desired":
		if len(pos) != 1 {
			return nil, fmt.Errorf("desired takes one count")
		}
		n, err := strconv.Atoi(pos[0])
		if err != nil {
			return nil, err
		}
		return DesiredChanged{Desired: n, Reason: kv["reason"]}, nil
	case "bounds":
		s, err := parseSpec(kv)
		return BoundsChanged{Nodes: s}, err
	case "tick":
		return Tick{}, nil
	case "provisioned":
		ids, err := parseIDs(pos)
		return Provisioned{IDs: ids}, err
	case "provision-failed":
		return ProvisionFailed{Err: strings.Join(pos, " ")}, nil
	case "joined", "lost", "busy", "idle", "drained":
		id, err := oneID()
		if err != nil {
			return nil, err
		}
		switch cmd {
		case "joined":
			return NodeJoined{ID: id}, nil
		case "lost":
			return NodeLost{ID: id}, nil
		case "busy", "idle":
			return NodeBusy{ID: id, Busy: cmd == "busy"}, nil
		}
		return DrainComplete{ID: id}, nil
	case "adopt":
		var ev Adopt
		var err error
		for k, dst := range map[string]*[]NodeID{"current": &ev.Current, "pending": &ev.Pending, "busy": &ev.Busy} {
			if v, ok := kv[k]; ok {
				if *dst, err = parseIDs([]string{v}); err != nil {
					return nil, err
				}
			}
		}
		return ev, nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}
