package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var fence1 = Fence{Controller: "c1", Epoch: 1, Seq: 1}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		field string // "" for valid
	}{
		{"create ok", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-1", Offering: "g8/spot"}).Validate(), ""},
		{"create no fence", (&CreateRequest{Pool: "gpu", MachineID: "gpu-1", Offering: "g8"}).Validate(), "fence.controller"},
		{"create epoch 0", (&CreateRequest{Fence: Fence{Controller: "c"}, Pool: "gpu", MachineID: "gpu-1", Offering: "g8"}).Validate(), "fence.epoch"},
		{"create no pool", (&CreateRequest{Fence: fence1, MachineID: "gpu-1", Offering: "g8"}).Validate(), "pool"},
		{"create bad id", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu 1", Offering: "g8"}).Validate(), "machine_id"},
		{"create id starts with dash", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "-x", Offering: "g8"}).Validate(), "machine_id"},
		{"create long id", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: strings.Repeat("a", 64), Offering: "g8"}).Validate(), "machine_id"},
		{"create no offering", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-1"}).Validate(), "offering"},
		{"create empty label", (&CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-1", Offering: "g8", Labels: map[string]string{"": "x"}}).Validate(), "labels"},
		{"configure ok", (&ConfigureRequest{Fence: fence1, Pool: "p", MachineID: "m", Cluster: "head", Bootstrap: []byte("x")}).Validate(), ""},
		{"configure no cluster", (&ConfigureRequest{Fence: fence1, Pool: "p", MachineID: "m", Bootstrap: []byte("x")}).Validate(), "cluster"},
		{"configure no blob", (&ConfigureRequest{Fence: fence1, Pool: "p", MachineID: "m", Cluster: "head"}).Validate(), "bootstrap"},
		{"drain ok", (&DrainRequest{Fence: fence1, Pool: "p", MachineID: "m"}).Validate(), ""},
		{"drain no id", (&DrainRequest{Fence: fence1, Pool: "p"}).Validate(), "machine_id"},
		{"delete ok", (&DeleteRequest{Fence: fence1, Pool: "p", MachineID: "m.1_a"}).Validate(), ""},
		{"delete no pool", (&DeleteRequest{Fence: fence1, MachineID: "m"}).Validate(), "pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.field == "" {
				if tt.err != nil {
					t.Fatalf("Validate() = %v, want nil", tt.err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(tt.err, &inv) {
				t.Fatalf("Validate() = %v, want an InvalidError", tt.err)
			}
			if !strings.HasPrefix(tt.err.Error(), tt.field+":") {
				t.Fatalf("Validate() = %q, want it to name the field %q first", tt.err, tt.field)
			}
		})
	}
}

func TestFenceTable(t *testing.T) {
	a1 := Fence{Controller: "a", Epoch: 1, Seq: 5}
	a1old := Fence{Controller: "a", Epoch: 1, Seq: 2}
	b1 := Fence{Controller: "b", Epoch: 1, Seq: 9}
	b2 := Fence{Controller: "b", Epoch: 2, Seq: 1}
	a3 := Fence{Controller: "a", Epoch: 3}
	steps := []struct {
		pool  string
		f     Fence
		stale bool
		want  Fence // Highest(pool) afterwards
	}{
		{"p", a1, false, a1},
		{"p", a1old, false, a1},                          // same holder, lower seq: a retry, accepted; seq stays at the highest
		{"p", b1, true, a1},                              // same epoch, other controller: split brain, refused
		{"p", b2, false, b2},                             // newer epoch takes over
		{"p", a1, true, b2},                              // the deposed controller is fenced out
		{"q", a1, false, a1},                             // pools are independent
		{"p", a3, false, a3},                             // and a still newer epoch takes p back
		{"p", b2, true, a3},                              // b is now stale
		{"p", Fence{"a", 3, 7}, false, Fence{"a", 3, 7}}, // seq moves up
	}
	var ft FenceTable
	if _, ok := ft.Highest("p"); ok {
		t.Fatal("empty table has a fence")
	}
	for i, s := range steps {
		err := ft.Admit(s.pool, s.f)
		if IsStaleFence(err) != s.stale || (!s.stale && err != nil) {
			t.Fatalf("step %d: Admit(%s, %s) = %v, want stale=%v", i, s.pool, s.f, err, s.stale)
		}
		if got, _ := ft.Highest(s.pool); got != s.want {
			t.Fatalf("step %d: Highest(%s) = %s, want %s", i, s.pool, got, s.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	cause := errors.New("api said no")
	tests := []struct {
		err  error
		kind string
		is   func(error) bool
		msg  string
	}{
		{NewInsufficientCapacity("g8/spot", cause), KindInsufficientCapacity, IsInsufficientCapacity, `insufficient capacity for offering "g8/spot": api said no`},
		{NewQuotaExceeded("g8/spot", 4, nil), KindQuotaExceeded, IsQuotaExceeded, `quota of offering "g8/spot" exceeded (limit 4 machines)`},
		{NewQuotaExceeded("", 10, nil), KindQuotaExceeded, IsQuotaExceeded, `total quota exceeded (limit 10 machines)`},
		{NewNotFound("m1"), KindNotFound, IsNotFound, `machine "m1" not found`},
		{NewStaleFence("p", Fence{"a", 1, 2}, Fence{"b", 2, 0}), KindStaleFence, IsStaleFence, `stale fence for pool "p": got a@1#2, pool is held by b@2#0`},
		{NewTransient(cause, time.Second), KindTransient, IsTransient, `transient provider error (retry after 1s): api said no`},
		{NewConflict("m1", Creating, "configure needs an idle machine"), KindConflict, IsConflict, `machine "m1" is creating: configure needs an idle machine`},
		{NewInvalid("offering", "unknown offering \"x\""), KindInvalid, IsInvalid, `offering: unknown offering "x"`},
	}
	all := []func(error) bool{IsInsufficientCapacity, IsQuotaExceeded, IsNotFound, IsStaleFence, IsTransient, IsConflict, IsInvalid}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			wrapped := fmt.Errorf("create machine %q: %w", "m1", tt.err)
			if got := Kind(wrapped); got != tt.kind {
				t.Errorf("Kind = %q, want %q", got, tt.kind)
			}
			if !tt.is(wrapped) {
				t.Errorf("Is* helper does not see through %%w")
			}
			n := 0
			for _, is := range all {
				if is(wrapped) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d Is* helpers match, want exactly 1", n)
			}
			if tt.err.Error() != tt.msg {
				t.Errorf("Error() = %q, want %q", tt.err.Error(), tt.msg)
			}
		})
	}
	if Kind(nil) != KindNone || Kind(errors.New("x")) != KindUnknown || Kind(fmt.Errorf("get: %w", context.Canceled)) != KindCanceled {
		t.Error("Kind of nil, plain or canceled error is wrong")
	}
	if !errors.Is(NewTransient(cause, 0), cause) || !errors.Is(NewInsufficientCapacity("x", cause), cause) {
		t.Error("errors do not unwrap to their cause")
	}
	if IgnoreNotFound(NewNotFound("m")) != nil || IgnoreNotFound(cause) != cause {
		t.Error("IgnoreNotFound")
	}
}
