package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillStore writes n instances (half of them assigned) and closes the
// store, leaving one checkpointed database file.
func fillStore(tb testing.TB, path string, n int) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := s.RegisterWorker(ctx, Registration{ID: "w", Host: "h"}, t0); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i += 500 {
		batch := make([]Instance, 0, 500)
		for j := i; j < min(n, i+500); j++ {
			batch = append(batch, newInst(fmt.Sprintf("i%07d", j)))
		}
		if err := s.InsertInstances(ctx, batch, t0); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestOpenRefusesCorruptFile damages a database file the ways a disk or a
// careless copy does — a page's b-tree header overwritten, the file cut
// short, the header garbled — and checks Open refuses each with ErrCorrupt
// and a message naming the file, instead of starting on wrong state.
func TestOpenRefusesCorruptFile(t *testing.T) {
	damage := map[string]func(b []byte) []byte{
		"page header overwritten": func(b []byte) []byte {
			const page = 4096
			for p := 3; p*page+16 < len(b); p += 7 { // several b-tree pages
				copy(b[p*page:], []byte{0x0d, 0xff, 0xff, 0x7f, 0xff, 0x00, 0x10, 0x00})
			}
			return b
		},
		"truncated to half": func(b []byte) []byte { return b[:len(b)/2/4096*4096] },
		"header garbled":    func(b []byte) []byte { copy(b, "this is not sqlite at all"); return b },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tide.db")
			fillStore(t, path, 3000)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(context.Background(), path, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open accepted a damaged file (%s)", name)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s", err, path)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}

// BenchmarkOpenQuickCheck measures Open (with its quick_check) on a store
// of 10k and 100k instances.
func BenchmarkOpenQuickCheck(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "tide.db")
			fillStore(b, path, n)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s, err := Open(ctx, path, Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
		})
	}
}
