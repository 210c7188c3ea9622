package policy

import (
	"math"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Turnover is what the tide policy learns of its pool from one report to
// the next: how fast running work finishes and in what pieces it frees
// capacity (the report's Finished counters), and how long a node takes
// from its purchase to its join.
//
// It serves one rule: work that is sure enough to finish before a node
// bought now could join frees room for the backlog, so that part of the
// backlog needs no new node. The scheduler gives freed room to the
// longest-waiting instances first, so they start on it before the node
// would have joined, and the node would join empty (on short-job traces
// such as Azure's code replicas most of tide's purchases did: bought for
// a burst that finished on the nodes already there, and released unused).
//
// The completions a purchase counts on are those that come within a boot
// with the confidence Config.Prefer asks for, as if they arrive as a
// Poisson stream at the measured rate: k − z·√k of the k expected
// (z = 1 for balanced, 0 for cost; latency counts on none), in pieces the
// size of the average finished instance (a piece of 1 GPU holds no
// 8-GPU instance). The boot is the time from the latest purchase before
// a node's join to the join (shorter than the boot when purchases
// overlap, so the credit errs small); once every node asked for has
// joined, the purchases are forgotten, so that a node joining later
// without a purchase (a spot node's replacement) is no sample: counted
// from the last purchase, such joins had put the boot at 4–13 minutes on
// pools that boot in 40 s, and a backlog waited for completions over that
// span (docs/benchmarks.md, "Scaling quality XI"). The completions are
// counted on for one boot from when the backlog began to wait, and the
// decision asks to be made again then (Decision.Recheck): a backlog still
// waiting after a boot has had the completions it counted on and is
// bought for whole. Without that, a credit renewed at every decision
// while the rate held kept a backlog waiting for 20 boots (Helios case
// 31337/178 under cost). Nothing is counted before a join was seen, from
// a reporter without the counters (Kubernetes mode), or for a backlog
// with a gang (a gang needs its room at once).
type Turnover struct {
	// At is the report the counters below were read from; Finished and
	// Freed are its Finished and FinishedRequests (CPU cores, memory GiB,
	// GPUs).
	At       time.Time  `json:"at,omitzero"`
	Finished int        `json:"finished,omitempty"`
	Freed    [3]float64 `json:"freed"`
	// Rate is the instances finished per second and FreedRate the room
	// they freed per second, averaged over about turnoverWindow.
	Rate      float64    `json:"rate,omitempty"`
	FreedRate [3]float64 `json:"freed_rate"`
	// Boot is the estimated time from a purchase to the node's join (zero:
	// no join seen yet); Buys are the latest purchases, newest first; Seen
	// is the latest join counted.
	Boot time.Duration `json:"boot,omitempty"`
	Buys [4]time.Time  `json:"buys"`
	Seen time.Time     `json:"seen,omitzero"`
}

// turnoverWindow is the time constant of the rates: long enough to span
// the gaps between a workload's bursts, short enough that a pool whose
// work stops finishing buys for all its backlog again within minutes.
const turnoverWindow = 5 * time.Minute

// turnoverPieces caps the pieces the credit is cut into (each one a free
// space the purchase's packing looks at).
const turnoverPieces = 64

// observe returns t updated with the report in (at in.Now).
func (t Turnover) observe(in *Input) Turnover {
	joined := 0 // unmarked nodes that joined
	for i := range in.Pressure.Nodes {
		n := &in.Pressure.Nodes[i]
		j := n.JoinedAt
		if !j.IsZero() && n.MarkedAt.IsZero() {
			joined++
		}
		if j.IsZero() || !j.After(t.Seen) {
			continue
		}
		t.Seen = j
		if b := t.buyBefore(j); !b.IsZero() {
			if sample := j.Sub(b); t.Boot == 0 {
				t.Boot = sample
			} else {
				t.Boot = (t.Boot*7 + sample*3) / 10
			}
		}
	}
	if joined >= in.Desired {
		// Every node asked for has joined: the purchases are served. A
		// join without a purchase after it replaces a node (a spot node
		// relaunched, a boot that failed and was retried) and says
		// nothing of how long a purchase takes.
		t.Buys = [len(t.Buys)]time.Time{}
	}
	var freed [3]float64
	addRequests(&freed, in.Pressure.FinishedRequests)
	finished := in.Pressure.Finished
	if !t.At.IsZero() && in.Now.After(t.At) {
		decay := math.Exp(-in.Now.Sub(t.At).Seconds() / turnoverWindow.Seconds())
		dn := 0.0
		if finished > t.Finished { // below: the reporter restarted, nothing is counted
			dn = float64(finished - t.Finished)
		}
		t.Rate = t.Rate*decay + dn/turnoverWindow.Seconds()
		for d := range freed {
			df := 0.0
			if dn > 0 {
				df = max(freed[d]-t.Freed[d], 0)
			}
			t.FreedRate[d] = t.FreedRate[d]*decay + df/turnoverWindow.Seconds()
		}
	}
	t.At, t.Finished, t.Freed = in.Now, finished, freed
	return t
}

// bought returns t with a purchase at now recorded.
func (t Turnover) bought(now time.Time) Turnover {
	copy(t.Buys[1:], t.Buys[:len(t.Buys)-1])
	t.Buys[0] = now
	return t
}

// buyBefore returns the latest purchase before at (zero: none known).
func (t *Turnover) buyBefore(at time.Time) time.Time {
	for _, b := range t.Buys {
		if !b.IsZero() && b.Before(at) {
			return b
		}
	}
	return time.Time{}
}

// Expected returns how many instances the purchase may count on to
// finish within a boot at confidence z (k − z·√k of the k expected; 0
// before a boot was seen or when nothing finishes).
func (t *Turnover) Expected(z float64) float64 {
	if t.Boot <= 0 || t.Rate <= 0 {
		return 0
	}
	k := t.Rate * t.Boot.Seconds()
	return max(k-z*math.Sqrt(k), 0)
}

// credit appends to free the room of n instances finishing (Expected), in
// pieces the size of the average finished instance, at most
// turnoverPieces of them.
func (t *Turnover) credit(free []capacity.Resources, n float64) []capacity.Resources {
	pieces := int(min(math.Floor(n), turnoverPieces))
	if pieces < 1 || t.Rate <= 0 {
		return free
	}
	per := n / float64(pieces) / t.Rate // seconds of finishing per piece
	piece := capacity.Resources{
		MilliCPU: int64(math.Round(t.FreedRate[0] * per * 1000)),
		Memory:   int64(math.Round(t.FreedRate[1] * per * (1 << 30))),
		GPUs:     int64(math.Floor(t.FreedRate[2]*per + 1e-9)),
	}
	for range pieces {
		free = append(free, piece)
	}
	return free
}

// addRequests adds r to v (CPU cores, memory GiB, GPUs).
func addRequests(v *[3]float64, r capacity.Resources) {
	v[0] += float64(r.MilliCPU) / 1000
	v[1] += float64(r.Memory) / (1 << 30)
	v[2] += float64(r.GPUs)
}
