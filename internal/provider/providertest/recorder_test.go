package providertest_test

import (
	"errors"
	"testing"

	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/sdk/provider"
)

func TestRecorderConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		return newSim(t, func(p provider.Provider) provider.Provider { return providertest.NewRecorder(p) })
	})
}

func TestRecorderLogsAndInjects(t *testing.T) {
	h := newSim(t, func(p provider.Provider) provider.Provider { return p })
	r := providertest.NewRecorder(h.Provider)
	ctx := t.Context()
	f := provider.Fence{Controller: "c", Epoch: 1, Seq: 1}
	req := provider.CreateRequest{Fence: f, Pool: "p", MachineID: "m1", Offering: offering}

	crash := errors.New("controller crashed")
	r.FailNext(tideprovider.OpCreate, provider.NewTransient(errors.New("throttled"), 0))
	if _, err := r.Create(ctx, req); !provider.IsTransient(err) {
		t.Fatalf("first Create = %v, want the injected transient error", err)
	}
	if _, err := h.Provider.Get(ctx, "m1"); !provider.IsNotFound(err) {
		t.Fatalf("an injected error reached the provider: Get = %v", err)
	}
	var after []tideprovider.Op
	r.After = func(c providertest.Call) { after = append(after, c.Op) }
	if _, err := r.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	r.Before = func(c providertest.Call) error {
		if c.Op == tideprovider.OpDelete {
			return crash
		}
		return nil
	}
	if _, err := r.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "p", MachineID: "m1"}); !errors.Is(err, crash) {
		t.Fatalf("Delete = %v, want the Before error", err)
	}
	if _, err := r.Get(ctx, "m1"); err != nil {
		t.Fatalf("Delete was forwarded despite Before: %v", err)
	}
	calls := r.Calls()
	want := []struct {
		op        tideprovider.Op
		forwarded bool
		failed    bool
	}{
		{tideprovider.OpCreate, false, true},
		{tideprovider.OpCreate, true, false},
		{tideprovider.OpDelete, false, true},
		{tideprovider.OpGet, true, false},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls logged, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Op != w.op || c.Forwarded != w.forwarded || (c.Err != nil) != w.failed || c.MachineID != "m1" {
			t.Errorf("call %d = %+v, want op %s forwarded=%v failed=%v", i, c, w.op, w.forwarded, w.failed)
		}
	}
	if calls[1].Fence != f || calls[1].Pool != "p" {
		t.Errorf("call 1 fence/pool = %s/%s", calls[1].Fence, calls[1].Pool)
	}
	if got := r.Calls(tideprovider.OpCreate); len(got) != 2 {
		t.Errorf("Calls(create) = %d calls, want 2", len(got))
	}
	if len(after) != 2 || after[0] != tideprovider.OpCreate || after[1] != tideprovider.OpGet {
		t.Errorf("After saw %v, want the two forwarded calls [create get]", after)
	}
	r.Reset()
	if len(r.Calls()) != 0 {
		t.Error("Reset kept calls")
	}
}
