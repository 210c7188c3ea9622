package store

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/tide-project/tide/internal/chaostest"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The torn-write tests: a process killed inside a transaction, and the
// tail of the write-ahead log torn as a power cut leaves it.

const tornChildEnv = "TIDE_STORE_TORN_CHILD"

// tornChild writes batches of instances, each in one transaction
// (InsertInstances), and prints "begin B" before batch B and
// "commit B <size of the -wal file>" after it. With stop > 0 it prints
// "done" after stop batches and waits to be killed.
func tornChild(arg string) {
	path, rest, _ := strings.Cut(arg, "|")
	var size, stop int
	fmt.Sscanf(rest, "%d|%d", &size, &stop)
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for b := 0; stop == 0 || b < stop; b++ {
		batch := make([]Instance, size)
		for i := range batch {
			batch[i] = newInst(fmt.Sprintf("b%05d-%05d", b, i))
			batch[i].Command = strings.Repeat("x", 200) // rows of a realistic size
		}
		fmt.Fprintf(out, "begin %d\n", b)
		out.Flush()
		if err := s.InsertInstances(ctx, batch, t0); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		var wal int64
		if fi, err := os.Stat(path + "-wal"); err == nil {
			wal = fi.Size()
		}
		fmt.Fprintf(out, "commit %d %d\n", b, wal)
		out.Flush()
	}
	fmt.Fprintln(out, "done")
	out.Flush()
	select {} // killed by the parent
}

// tornRun is a child writing batches into path.
type tornRun struct {
	cmd   *exec.Cmd
	lines chan string
}

func startTorn(t *testing.T, path string, size, stop int) *tornRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9InsideTransaction$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%d", tornChildEnv, path, size, stop))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := &tornRun{cmd: cmd, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	return r
}

// next returns the child's next line.
func (r *tornRun) next(t *testing.T) []string {
	t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			t.Fatal("the child exited")
		}
		if strings.HasPrefix(l, "error") {
			t.Fatalf("child: %s", l)
		}
		return strings.Fields(l)
	case <-time.After(60 * time.Second):
		t.Fatal("the child wrote nothing for 60s")
	}
	return nil
}

func (r *tornRun) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = r.cmd.Wait()
}

// batchCounts reopens path (Open runs quick_check), runs the full
// integrity_check, and counts the stored instances of each batch.
func batchCounts(t *testing.T, path string) map[int]int {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("reopen after the kill: %v", err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	all, err := s.ListInstances(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for _, in := range all {
		b, err := strconv.Atoi(strings.TrimPrefix(in.ID[:6], "b"))
		if err != nil {
			t.Fatalf("unexpected instance %s", in.ID)
		}
		counts[b]++
	}
	return counts
}

// TestKill9InsideTransaction kills a process with SIGKILL at a random
// moment of an InsertInstances transaction on a real SQLite file, after
// it committed a few; reopened, the file passes quick_check and
// integrity_check, every committed batch is whole, and the batch the kill
// cut is all there or not at all (never part of it). Size: 2 rounds (a
// fresh file each) of 300-row transactions; TIDE_CHAOS=N runs N rounds of
// 3,000-row ones; the seed is printed and TIDE_CHAOS_SEED replays it.
func TestKill9InsideTransaction(t *testing.T) {
	if arg := os.Getenv(tornChildEnv); arg != "" {
		tornChild(arg)
		return
	}
	// 300-row transactions by default (the race detector slows the
	// child's writes tenfold), 3,000 at full size.
	size := 300
	rounds, full := chaostest.Size(t, 2)
	if full {
		size = 3000
	}
	seed := chaostest.Seed(t)
	t.Logf("seed %d (TIDE_CHAOS_SEED=%d TIDE_CHAOS=%d replays this run)", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 0x746f726e))
	kept, dropped := 0, 0
	var recovery []time.Duration
	for round := range rounds {
		path := filepath.Join(t.TempDir(), "tide.db")
		r := startTorn(t, path, size, 0)
		// Two batches to time a transaction, then the kill inside one of
		// the next three.
		var took time.Duration
		var began time.Time
		committed := -1
		target := 2 + rng.IntN(3)
		for {
			f := r.next(t)
			if f[0] == "commit" {
				committed, _ = strconv.Atoi(f[1])
				if committed == 1 {
					took = time.Since(began) // the second batch's duration
				}
				continue
			}
			began = time.Now()
			if b, _ := strconv.Atoi(f[1]); b == target {
				break
			}
		}
		time.Sleep(time.Duration(rng.Int64N(int64(took)*3/4 + 1))) // a random moment of the transaction
		r.kill(t)
		// The child's last words say which transaction the kill cut: the
		// last one begun (it may have moved past the target meanwhile).
		last := target
		for l := range r.lines {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "begin" {
				last, _ = strconv.Atoi(f[1])
			} else if len(f) == 3 && f[0] == "commit" {
				committed, _ = strconv.Atoi(f[1])
			}
		}
		opened := time.Now()
		counts := batchCounts(t, path)
		recovery = append(recovery, time.Since(opened))
		for b := 0; b <= committed; b++ {
			if counts[b] != size {
				t.Errorf("seed %d round %d: committed batch %d has %d of %d rows", seed, round, b, counts[b], size)
			}
		}
		switch counts[last] {
		case 0:
			dropped++
		case size:
			kept++ // its commit finished before the kill, unreported
		default:
			t.Errorf("seed %d round %d: the killed transaction (batch %d) left %d of its %d rows", seed, round, last, counts[last], size)
		}
		for b := range counts {
			if b > last {
				t.Errorf("seed %d round %d: batch %d, never begun, has rows", seed, round, b)
			}
		}
		if t.Failed() {
			return
		}
	}
	slices.Sort(recovery)
	t.Logf("seed %d: %d kills inside a transaction: %d cut transactions absent, %d whole (committed before the kill), 0 partial; "+
		"reopen + integrity_check p50 %v p99 %v", seed, rounds, dropped, kept,
		recovery[len(recovery)/2].Round(time.Millisecond), recovery[len(recovery)*99/100].Round(time.Millisecond))
}

// TestTornWALTail is the torn write a power cut leaves: a process commits
// batches and is killed, then the write-ahead log's last transaction is
// torn (cut at a random byte, or a random run of its bytes overwritten).
// Reopened, the store passes quick_check and integrity_check and holds
// every earlier batch whole and none of the torn one: SQLite's frame
// checksums drop the torn commit, and nothing else. (With synchronous=NORMAL
// a power cut may lose the last commits; Options.Durable fsyncs each.)
// Rounds: 1 of each tear, TIDE_CHAOS=N for N.
func TestTornWALTail(t *testing.T) {
	const size, batches = 100, 6
	rounds, _ := chaostest.Size(t, 1)
	seed := chaostest.Seed(t)
	t.Logf("seed %d (TIDE_CHAOS_SEED=%d TIDE_CHAOS=%d replays this run)", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 0x77616c))
	for _, tear := range []string{"cut", "garbage"} {
		for range rounds {
			path := filepath.Join(t.TempDir(), "tide.db")
			r := startTorn(t, path, size, batches)
			wal := map[int]int64{}
			for {
				f := r.next(t)
				if f[0] == "done" {
					break
				}
				if f[0] == "commit" {
					b, _ := strconv.Atoi(f[1])
					wal[b], _ = strconv.ParseInt(f[2], 10, 64)
				}
			}
			r.kill(t)
			from, to := wal[batches-2], wal[batches-1]
			if to <= from {
				t.Fatalf("the log was checkpointed during the last batch (%d → %d bytes): no tail to tear", from, to)
			}
			at := from + 1 + rng.Int64N(to-from-1)
			f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			switch tear {
			case "cut":
				err = f.Truncate(at)
			case "garbage":
				junk := make([]byte, min(to-at, 1+rng.Int64N(8192)))
				if _, err = f.ReadAt(junk, at); err == nil {
					for i := range junk {
						junk[i] ^= byte(1 + rng.IntN(255)) // every byte changed
					}
					_, err = f.WriteAt(junk, at)
				}
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			counts := batchCounts(t, path)
			for b := 0; b < batches-1; b++ {
				if counts[b] != size {
					t.Errorf("seed %d, %s at byte %d of the log: committed batch %d has %d of %d rows", seed, tear, at, b, counts[b], size)
				}
			}
			if n := counts[batches-1]; n != 0 {
				t.Errorf("seed %d, %s at byte %d (the last commit spans %d–%d): the torn batch has %d of %d rows", seed, tear, at, from, to, n, size)
			}
			t.Logf("%s at byte %d of the log (last commit %d–%d): earlier batches whole, the torn one absent", tear, at, from, to)
		}
	}
}

// TestOpenRefusesDamagedWALHeader: SQLite ignores a write-ahead log whose
// header is damaged and opens the database at its last checkpoint, so the
// transactions committed since vanish without an error (the test shows it
// on a copy). Open refuses such a log with ErrCorrupt naming it; once the
// log is moved away, as the message says, it opens at the checkpoint.
func TestOpenRefusesDamagedWALHeader(t *testing.T) {
	damage := map[string]func(h []byte){
		"magic":    func(h []byte) { h[3] ^= 0x10 },
		"salt":     func(h []byte) { h[17] ^= 0xff },
		"checksum": func(h []byte) { h[30] ^= 0x01 },
		"zeroed":   func(h []byte) { clear(h) },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "tide.db")
			r := startTorn(t, path, 100, 4)
			for f := r.next(t); f[0] != "done"; f = r.next(t) {
			}
			r.kill(t) // the four batches stay in the log: no checkpoint yet
			wal, err := os.ReadFile(path + "-wal")
			if err != nil || len(wal) < walHeaderSize {
				t.Fatalf("no write-ahead log to damage (%d bytes, %v)", len(wal), err)
			}
			f(wal[:walHeaderSize])
			if err := os.WriteFile(path+"-wal", wal, 0o600); err != nil {
				t.Fatal(err)
			}
			// What SQLite alone makes of it, on a copy: an empty, valid store.
			cp := filepath.Join(dir, "copy.db")
			for _, suffix := range []string{"", "-wal"} {
				raw, err := os.ReadFile(path + suffix)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(cp+suffix, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			db, err := sql.Open("sqlite", "file:"+cp)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			err = db.QueryRow(`SELECT count(*) FROM instances`).Scan(&n)
			db.Close()
			t.Logf("SQLite alone on the damaged log: %d of 400 committed instances (%v)", n, err)

			s, err := Open(context.Background(), path, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a write-ahead log with a damaged header")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path+"-wal") {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s-wal", err, path)
			}
			t.Logf("refused: %v", err)
			if err := os.Rename(path+"-wal", filepath.Join(dir, "moved-wal")); err != nil {
				t.Fatal(err)
			}
			s, err = Open(context.Background(), path, Options{})
			if err != nil {
				t.Fatalf("Open once the log is moved away: %v", err)
			}
			s.Close()
		})
	}
}
