package journal

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestJournalOnRealAPIServer checks the journal contract on a real
// apiserver, through two handles on one ConfigMap (two controller replicas):
// epochs are unique under concurrency, the deposed replica's writes are
// refused and change nothing, and the new one reads everything back.
func TestJournalOnRealAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	api, err := kubeapi.NewREST(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a, b := New(api, "default", "tide-journal-gpu"), New(api, "default", "tide-journal-gpu")
	if st, err := a.Load(ctx); err != nil || st.Epoch != 0 || len(st.Records) != 0 || st.HasDesired {
		t.Fatalf("fresh journal = %+v, %v", st, err)
	}
	ea, err := a.RaiseEpoch(ctx)
	if err != nil || ea != 1 {
		t.Fatalf("RaiseEpoch = %d, %v", ea, err)
	}
	s1, err := a.NextSerial(ctx, ea)
	if err != nil || s1 != 1 {
		t.Fatalf("NextSerial = %d, %v", s1, err)
	}
	rec := controller.Record{MachineID: "gpu-0-1", Ordinal: 0, Offering: "g8/on-demand", Serial: s1, Intent: controller.IntentCreate}
	if err := a.Put(ctx, ea, rec); err != nil {
		t.Fatal(err)
	}
	if err := a.SetDesired(ctx, ea, 3); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, ea, controller.Record{MachineID: "x", Intent: "maybe"}); err == nil {
		t.Fatal("an invalid record was stored")
	}

	// Eight concurrent takeovers get eight distinct epochs.
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			e, err := b.RaiseEpoch(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || seen[e] {
				t.Errorf("RaiseEpoch = %d, %v (seen before: %v)", e, err, seen[e])
			}
			seen[e] = true
		})
	}
	wg.Wait()
	eb := uint64(len(seen)) + ea
	if !seen[eb] {
		t.Fatalf("epochs %v, want %d..%d", seen, ea+1, eb)
	}
	for name, err := range map[string]error{
		"put":     a.Put(ctx, ea, controller.Record{MachineID: "gpu-1-2", Ordinal: 1, Intent: controller.IntentCreate}),
		"remove":  a.Remove(ctx, ea, "gpu-0-1"),
		"desired": a.SetDesired(ctx, ea, 9),
		"serial":  func() error { _, err := a.NextSerial(ctx, ea); return err }(),
	} {
		if !errors.Is(err, controller.ErrStaleEpoch) {
			t.Errorf("deposed %s = %v, want ErrStaleEpoch", name, err)
		}
	}
	st, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != eb || st.Serial != 1 || st.Desired != 3 || !st.HasDesired || fmt.Sprint(st.Records) != fmt.Sprint([]controller.Record{rec}) {
		t.Fatalf("state after takeover = %+v", st)
	}
	if err := b.Remove(ctx, eb, "gpu-0-1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, eb, "gpu-0-1"); err != nil {
		t.Fatalf("removing an absent record: %v", err)
	}
	if st, _ := a.Load(ctx); len(st.Records) != 0 {
		t.Fatalf("records = %v", st.Records)
	}
}
