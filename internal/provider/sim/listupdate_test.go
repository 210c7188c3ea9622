package sim_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

// TestListSharedUpdateMatchesList drives two pools through random
// creates, configures, drains, deletes, interruptions, losses, timeouts
// and API errors, and lists pool "a" after every operation both with
// ListSharedUpdate (keeping its list, as the simulator's controller does)
// and with List: the two must be equal each time, whether the update was
// made in place or not. A second caller's token is interleaved now and
// then: it must not make the first caller's in-place update skip changes.
func TestListSharedUpdateMatchesList(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			offs := catalog()
			offs[1].InterruptionProbability = 1
			offs[0].HangRate = 0.05
			e := newEnv(t, sim.Config{Offerings: offs, InterruptionNotice: 30 * time.Second, BootTimeout: 4 * time.Minute}, seed)
			rng := rand.New(rand.NewPCG(seed, 99))
			var bufs [2][]provider.Machine
			cur, token, inPlace, other := 0, uint64(0), 0, uint64(0)
			ids := map[string][]string{}
			f := provider.Filter{Pool: "a"}
			for step := range 3000 {
				pool := []string{"a", "b"}[rng.IntN(2)]
				switch op := rng.IntN(10); {
				case op < 3:
					id := fmt.Sprintf("%s-%d", pool, step)
					if _, err := e.create(pool, id, []string{onDemand, spot}[rng.IntN(2)]); err == nil {
						ids[pool] = append(ids[pool], id)
					}
				case op < 8 && len(ids[pool]) > 0:
					id := ids[pool][rng.IntN(len(ids[pool]))]
					switch rng.IntN(5) {
					case 0, 1:
						_, _ = e.c.Configure(e.ctx, provider.ConfigureRequest{Fence: e.fence(), Pool: pool, MachineID: id, Cluster: "h"})
					case 2:
						_, _ = e.c.Drain(e.ctx, provider.DrainRequest{Fence: e.fence(), Pool: pool, MachineID: id})
					case 3:
						_, _ = e.delete(pool, id)
					case 4:
						if rng.IntN(4) == 0 {
							_ = e.c.Lose(id)
						} else {
							_ = e.c.Interrupt(id)
						}
					}
				case op == 8:
					if err := e.c.SetAPIErrorRate([]float64{0, 0, 0.3}[rng.IntN(3)], 0); err != nil {
						t.Fatal(err)
					}
				}
				e.clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
				if rng.IntN(50) == 0 { // another caller takes a token
					_, other, _, _ = e.c.ListSharedUpdate(e.ctx, provider.Filter{Pool: "b"}, nil, other, nil)
				}
				next := 1 - cur
				list, tok, in, err := e.c.ListSharedUpdate(e.ctx, f, bufs[cur], token, bufs[next])
				if err != nil {
					if !provider.IsTransient(err) {
						t.Fatal(err)
					}
					continue
				}
				token = tok
				if in {
					inPlace++
				} else {
					bufs[next], cur = list, next
				}
				if err := e.c.SetAPIErrorRate(0, 0); err != nil {
					t.Fatal(err)
				}
				want, err := e.c.List(e.ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) == 0 && len(list) == 0 {
					continue
				}
				if !reflect.DeepEqual(list, want) {
					t.Fatalf("step %d: ListSharedUpdate (in place %v) differs from List:\n got %+v\nwant %+v", step, in, list, want)
				}
			}
			if inPlace == 0 {
				t.Fatal("no list was updated in place: the test does not exercise the update")
			}
			t.Logf("%d lists updated in place", inPlace)
		})
	}
}
