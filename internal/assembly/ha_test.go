package assembly

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/head"
)

// haAssembly is one of several heads sharing an embedded etcd.
type haAssembly struct {
	a    *Assembly
	stop context.CancelFunc
	done chan error
}

func startHAAssembly(t *testing.T, storeURL, cfgPath string) *haAssembly {
	t.Helper()
	a, err := New(context.Background(), Config{ConfigPath: cfgPath, Head: head.Config{DataDir: t.TempDir(),
		Store: storeURL, LeaseTTL: time.Second, Port: freePort(t), SchedulerInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ha := &haAssembly{a: a, stop: cancel, done: make(chan error, 1)}
	go func() { ha.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ha.done:
		case <-time.After(60 * time.Second):
			t.Error("an assembly did not stop within 60s")
		}
	})
	return ha
}

// started reports whether this head started pool name's controller;
// running, whether it also took the pool over (raised its epoch).
func (h *haAssembly) started(name string) bool {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	p := h.a.pools[name]
	return p != nil && p.cancel != nil
}

func (h *haAssembly) running(name string) bool {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	p := h.a.pools[name]
	return p != nil && p.cancel != nil && p.ctl.Status().Started
}

// TestReloadOnAStandbyStartsNothing: of two heads on one etcd, only the
// leader runs pools; a reload that adds a pool on the standby records it
// without starting its controller there, and the standby runs it once it
// takes over.
func TestReloadOnAStandbyStartsNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	storeURL := fmt.Sprintf("etcd://%s/assembly-%d", strings.TrimPrefix(srv.Endpoint(), "http://"), time.Now().UnixNano())
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(path, []byte("pools:\n"+simPool("a", "[0, 1]", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	one := startHAAssembly(t, storeURL, path)
	two := startHAAssembly(t, storeURL, path)
	var leader, standby *haAssembly
	deadline := time.Now().Add(20 * time.Second)
	for leader == nil && time.Now().Before(deadline) {
		switch {
		case one.a.Head().Leader().Self && one.running("a"):
			leader, standby = one, two
		case two.a.Head().Leader().Self && two.running("a"):
			leader, standby = two, one
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	if leader == nil {
		t.Fatal("no head led with its pool running within 20s")
	}
	if standby.started("a") {
		t.Fatal("the standby runs the pool too")
	}
	ta := &testAssembly{t: t, path: path}
	if err := standby.a.Reload(ta.load(simPool("a", "[0, 1]", ""), simPool("b", "[0, 1]", ""))); err != nil {
		t.Fatal(err)
	}
	// (Its journal writes would be refused, the leader's fence being on
	// them, but a standby must not even try.)
	if standby.started("b") || standby.started("a") {
		t.Fatal("a reload on the standby started pools there")
	}
	leader.stop()
	<-leader.done
	leader.done <- nil
	deadline = time.Now().Add(20 * time.Second)
	for !(standby.running("a") && standby.running("b")) {
		if time.Now().After(deadline) {
			t.Fatal("the standby did not run both pools within 20s of taking over")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
