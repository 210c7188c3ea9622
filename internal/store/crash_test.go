package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const crashChildEnv = "TIDE_STORE_CRASH_CHILD"

// crashChild writes forever, printing each acknowledged (committed) change;
// the parent kills it with SIGKILL.
func crashChild(path string) {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if _, err := s.RegisterWorker(ctx, Registration{ID: "w", Host: "h"}, t0); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		id := fmt.Sprintf("i%06d", i)
		if err := s.InsertInstances(ctx, []Instance{newInst(id)}, t0); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "pending %s\n", id)
		if i%2 == 0 {
			got, err := s.Assign(ctx, []Assignment{{InstanceID: id, Attempt: 0, Worker: "w"}}, t0)
			if err != nil || len(got) != 1 {
				fmt.Println("error assign", err)
				os.Exit(2)
			}
			fmt.Fprintf(out, "assigned %s\n", id)
		}
		out.Flush()
	}
}

// TestCrashSurvivesKill9 kills a writing process with SIGKILL and checks
// that every change it acknowledged is in the reopened database, and that
// the file is intact (the head survives kill -9 with nothing lost).
func TestCrashSurvivesKill9(t *testing.T) {
	if p := os.Getenv(crashChildEnv); p != "" {
		crashChild(p)
		return
	}
	path := filepath.Join(t.TempDir(), "tide.db")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashSurvivesKill9$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 1 && f[0] == "error" {
			t.Fatalf("child: %s", sc.Text())
		}
		if len(f) == 2 {
			acked[f[1]] = f[0]
		}
		if len(acked) >= 300 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL mid-write
		t.Fatal(err)
	}
	cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("child acknowledged only %d changes", len(acked))
	}
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var check string
	if err := s.r.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	for id, what := range acked {
		in, err := s.GetInstance(context.Background(), id)
		if err != nil {
			t.Fatalf("acknowledged instance %s lost: %v", id, err)
		}
		if what == "assigned" && (in.Status != StatusAssigned || in.Attempt != 1) {
			t.Fatalf("acknowledged assignment of %s lost: %s attempt %d", id, in.Status, in.Attempt)
		}
	}
	// The reopened store keeps working.
	if err := s.InsertInstances(context.Background(), []Instance{newInst("after")}, t0); err != nil {
		t.Fatal(err)
	}
}
