package agent

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// TestWorkersOnOneHostNeverShareAPort is the regression test of issue 17's
// first bug: two workers of one host (as the local provider runs them) with
// the same port range each start an instance that has not bound $PORT (yet).
// Both ports pass a bind test, so before the host-wide reservation both
// instances got the first port of the range, and the second service to bind
// failed with "Address already in use".
func TestWorkersOnOneHostNeverShareAPort(t *testing.T) {
	th := newTestHead(t)
	locks := t.TempDir()
	var lo int
	ports := map[string]int{}
	for i, name := range []string{"w1", "w2"} {
		cfg := workerConfig(t, th, name)
		if i == 0 {
			lo = cfg.PortMin
		}
		cfg.PortMin, cfg.PortMax, cfg.PortLockDir = lo, lo+9, locks
		startWorker(t, cfg)
	}
	ids := map[string]string{}
	for _, name := range []string{"w1", "w2"} {
		req := cmdReq(`echo "port=$PORT"; exec sleep 30`)
		target := name
		req.TargetWorker = &target
		ids[name] = th.submit(req)
	}
	for name, id := range ids {
		in := th.waitStatus(id, store.StatusRunning, 15*time.Second)
		eventually(t, 5*time.Second, "output of "+name, func() bool { return strings.Contains(th.logs(id), "port=") })
		var p int
		if _, err := fmt.Sscanf(th.logs(id), "port=%d", &p); err != nil {
			t.Fatalf("%s: log %q: %v", name, th.logs(id), err)
		}
		if in.Port == nil || *in.Port != p {
			t.Fatalf("%s: reported port %v, $PORT %d", name, in.Port, p)
		}
		ports[name] = p
	}
	if ports["w1"] == ports["w2"] {
		t.Fatalf("both workers handed out port %d at once", ports["w1"])
	}
}

// TestPortReservationIsHostWide: a port reserved by another process (a
// worker of its own, here this test binary re-run as a helper) is skipped
// though it binds, and becomes free again the moment that process dies,
// without any cleanup: the kernel drops its lock.
func TestPortReservationIsHostWide(t *testing.T) {
	if dir := os.Getenv("TIDE_TEST_PORT_HOLDER"); dir != "" {
		lo, _ := strconv.Atoi(os.Getenv("TIDE_TEST_PORT_MIN"))
		pp := newPortPool(lo, lo+1, dir)
		pp.bindTest = func(int) bool { return true }
		fmt.Printf("held %d\n", pp.allocate())
		time.Sleep(time.Minute) // killed by the parent
		return
	}
	dir := t.TempDir()
	const lo = 30000 // never bound: the bind test is replaced
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortReservationIsHostWide$")
	cmd.Env = append(os.Environ(), "TIDE_TEST_PORT_HOLDER="+dir, "TIDE_TEST_PORT_MIN="+strconv.Itoa(lo))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != fmt.Sprintf("held %d\n", lo) {
		t.Fatalf("helper said %q (%v)", line, err)
	}

	pp := newPortPool(lo, lo+1, dir)
	pp.bindTest = func(int) bool { return true }
	if p := pp.allocate(); p != lo+1 {
		t.Fatalf("allocated %d while another process holds %d; want %d", p, lo, lo+1)
	}
	if p := pp.allocate(); p != 0 {
		t.Fatalf("allocated %d from a range that is all reserved", p)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if p := pp.allocate(); p != lo {
		t.Fatalf("after the holder died: allocated %d, want %d", p, lo)
	}
	// A second pool in this process (another worker) sees this one's too.
	other := newPortPool(lo, lo+1, dir)
	other.bindTest = pp.bindTest
	if p := other.allocate(); p != 0 {
		t.Fatalf("a second worker got %d while the first holds both", p)
	}
	pp.release(lo)
	if p := other.allocate(); p != lo {
		t.Fatalf("released port: got %d, want %d", p, lo)
	}
}
