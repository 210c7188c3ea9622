package head

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tide-project/tide/internal/chaostest"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/store"
)

const headChildEnv = "TIDE_HEAD_KILL_CHILD"

// headChild is the killed process: a head on the data dir in the
// environment, serving on a loopback port it prints.
func headChild(dir string) {
	ctx := context.Background()
	h, err := New(ctx, Config{DataDir: dir, Token: "t"})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("listening", ln.Addr().String())
	if err := h.Serve(ctx, ln); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
}

// startHeadChild starts a head process on dir and returns it with its
// address once it answers /health.
func startHeadChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHeadKill9DuringSubmitBurst$")
	cmd.Env = append(os.Environ(), headChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case line <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening ")
		if !ok {
			t.Fatalf("head child: %s", l)
		}
		return cmd, addr
	case <-time.After(60 * time.Second):
		t.Fatal("head child did not start in 60s")
	}
	return nil, ""
}

// TestHeadKill9DuringSubmitBurst kills the head process (SIGKILL) at a
// random moment of a burst of concurrent submissions, restarts it on the
// same data dir, and repeats; at the end every acknowledged submission
// must be there exactly once, with its name, and the file must pass the
// quick_check Open runs. Rounds: 3, TIDE_CHAOS=N for N; the seed is
// printed and TIDE_CHAOS_SEED replays it.
func TestHeadKill9DuringSubmitBurst(t *testing.T) {
	if dir := os.Getenv(headChildEnv); dir != "" {
		headChild(dir)
		return
	}
	rounds, _ := chaostest.Size(t, 3)
	seed := chaostest.Seed(t)
	t.Logf("seed %d (TIDE_CHAOS_SEED=%d TIDE_CHAOS=%d replays this run)", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 0x7469646))
	dir := t.TempDir()
	client := &http.Client{Timeout: 30 * time.Second}
	acked := map[string]string{} // instance id -> name
	var recovery []time.Duration
	tried := 0
	for round := 0; round < rounds; round++ {
		began := time.Now()
		cmd, addr := startHeadChild(t, dir)
		if round > 0 {
			recovery = append(recovery, time.Since(began))
		}
		killAt := time.Duration(rng.IntN(400)) * time.Millisecond
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 500/8+1; n++ {
					name := fmt.Sprintf("r%d-g%d-%d", round, g, n)
					body := fmt.Sprintf(`{"command":"echo %s","name":%q,"labels":{"round":"%d"}}`, name, name, round)
					req, _ := http.NewRequest("POST", "http://"+addr+"/instances", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer t")
					mu.Lock()
					tried++
					mu.Unlock()
					resp, err := client.Do(req)
					if err != nil {
						return // the head is gone
					}
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						return
					}
					var out struct {
						InstanceID string `json:"instance_id"`
					}
					if err := json.Unmarshal(raw, &out); err != nil || out.InstanceID == "" {
						return // cut mid-answer: not acknowledged
					}
					mu.Lock()
					acked[out.InstanceID] = name
					mu.Unlock()
				}
			}()
		}
		time.Sleep(killAt) // the random moment, drawn from the seed
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		wg.Wait()
		client.CloseIdleConnections()
	}
	began := time.Now()
	h, err := New(context.Background(), Config{DataDir: dir, Token: "t", Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatalf("seed %d: the head refuses to start after %d kills: %v", seed, rounds, err)
	}
	recovery = append(recovery, time.Since(began))
	defer h.Close()
	all, err := h.st.ListInstances(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*store.Instance{}
	names := map[string]int{}
	for _, in := range all {
		byID[in.ID] = in
		if in.Name != "" {
			names[in.Name]++
		}
	}
	lost := 0
	for id, name := range acked {
		in := byID[id]
		if in == nil || in.Name != name {
			lost++
			t.Errorf("seed %d: acknowledged submission %s (%s) is missing", seed, id, name)
		}
	}
	twice := 0
	for name, n := range names {
		if n > 1 {
			twice++
			t.Errorf("seed %d: %s stored %d times", seed, name, n)
		}
	}
	slices.Sort(recovery)
	t.Logf("seed %d: %d kills, %d submissions tried, %d acknowledged, %d stored, %d lost, %d duplicated; restart p50 %v p99 %v max %v",
		seed, rounds, tried, len(acked), len(all), lost, twice, recovery[len(recovery)/2].Round(time.Millisecond),
		recovery[len(recovery)*99/100].Round(time.Millisecond), recovery[len(recovery)-1].Round(time.Millisecond))
}
