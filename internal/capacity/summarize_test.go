package capacity

import (
	"math/rand/v2"
	"testing"
)

// TestSummarizeAnswersAsRunning: a summarized node answers Busy, Kinds,
// Allocated, Free and Pressure.Inflight as the same node computing them
// from Running, for random entries (daemons, counted entries, extended
// resources, none).
func TestSummarizeAnswersAsRunning(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for range 2000 {
		n := Node{ID: "n", Resources: Resources{MilliCPU: 32000, Memory: 128 << 30, GPUs: 4}}
		for range r.IntN(6) {
			in := Instance{Requests: Resources{MilliCPU: r.Int64N(4000), Memory: r.Int64N(8 << 30), GPUs: r.Int64N(2)},
				Daemon: r.IntN(4) == 0, Count: r.IntN(4)}
			if r.IntN(10) == 0 {
				in.Requests.Extended = map[string]int64{"fpga": r.Int64N(3)}
			}
			n.Running = append(n.Running, in)
		}
		s := n
		s.Summarize()
		b1, d1 := n.Kinds()
		b2, d2 := s.Kinds()
		p1, p2 := Pressure{Nodes: []Node{n, n}}, Pressure{Nodes: []Node{s, s}}
		if n.Busy() != s.Busy() || b1 != b2 || d1 != d2 || !n.Allocated().Equal(s.Allocated()) ||
			!n.Free().Equal(s.Free()) || p1.Inflight() != p2.Inflight() || b1 != n.Busy() {
			t.Fatalf("%+v: summarized busy %v kinds %v,%v allocated %v inflight %d; from Running %v, %v,%v, %v, %d",
				n.Running, s.Busy(), b2, d2, s.Allocated(), p2.Inflight(), n.Busy(), b1, d1, n.Allocated(), p1.Inflight())
		}
	}
}
