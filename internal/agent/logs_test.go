package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// pattern returns n deterministic bytes, different at every offset modulo
// 251, so a skipped or repeated byte changes the stream.
func pattern(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + i) % 251)
	}
	return b
}

func TestSegmentLogRotationKeepsOffsets(t *testing.T) {
	dir := t.TempDir()
	l, err := openSegmentLog(dir, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// 1000 bytes in writes of 37: 10 segments written, 3 kept.
	for off := 0; off < 1000; off += 37 {
		n := min(37, 1000-off)
		if w, err := l.Write(pattern(off, n)); err != nil || w != n {
			t.Fatalf("write at %d: %d, %v", off, w, err)
		}
	}
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, s := range segs {
		bases = append(bases, s.Base)
		if s.Size > 100 {
			t.Errorf("segment %d holds %d bytes, max 100", s.Base, s.Size)
		}
	}
	if fmt.Sprint(bases) != "[700 800 900]" {
		t.Fatalf("segments = %v, want [700 800 900]", bases)
	}
	tests := []struct {
		name                 string
		offset, limit        int64
		wantAvail, wantTotal int64
		wantFrom, wantLen    int
	}{
		{"rotated away clamps to oldest", 0, 50, 700, 1000, 700, 50},
		{"across segments", 750, 200, 700, 1000, 750, 200},
		{"to the end", 950, 1 << 20, 700, 1000, 950, 50},
		{"at the end", 1000, 10, 700, 1000, 1000, 0},
		{"beyond the end clamps", 5000, 10, 700, 1000, 1000, 0},
		{"limit zero gives sizes only", 800, 0, 700, 1000, 800, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := readLog(dir, tt.offset, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if c.AvailableOffset != tt.wantAvail || c.TotalSize != tt.wantTotal || c.Offset != int64(tt.wantFrom) {
				t.Fatalf("chunk = avail %d total %d offset %d, want %d %d %d", c.AvailableOffset, c.TotalSize, c.Offset,
					tt.wantAvail, tt.wantTotal, tt.wantFrom)
			}
			if !bytes.Equal(c.Content, pattern(tt.wantFrom, tt.wantLen)) {
				t.Fatalf("content of %d bytes from %d is wrong", len(c.Content), c.Offset)
			}
		})
	}
}

func TestSegmentLogReopenContinuesStream(t *testing.T) {
	dir := t.TempDir()
	l, err := openSegmentLog(dir, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write(pattern(0, 150)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// A restarted worker continues the last segment at the same offsets.
	l2, err := openSegmentLog(dir, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.Write(pattern(150, 100)); err != nil {
		t.Fatal(err)
	}
	c, err := readLog(dir, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c.TotalSize != 250 || c.AvailableOffset != 0 || !bytes.Equal(c.Content, pattern(0, 250)) {
		t.Fatalf("after reopen: avail %d total %d, %d bytes", c.AvailableOffset, c.TotalSize, len(c.Content))
	}
}

func TestReadLogMissingDir(t *testing.T) {
	_, err := readLog(filepath.Join(t.TempDir(), "nope"), 0, 10)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

// TestPyLetA14_12_FollowAcrossRotationGetsEveryByteOnce is A14.12's log
// half: PyLet numbers offsets over the files currently present, so when the
// oldest file is deleted every offset shifts and a follower skips or repeats
// data. Here a reader following the log while it rotates (writer and reader
// concurrent) receives every byte exactly once, in order, as long as it
// keeps up with retention.
func TestPyLetA14_12_FollowAcrossRotationGetsEveryByteOnce(t *testing.T) {
	dir := t.TempDir()
	// Retention (16 × 4 KiB) is larger than what the writer can get ahead
	// by: it waits for the reader every 32 KiB.
	l, err := openSegmentLog(dir, 4096, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const total = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	progress := make(chan int64, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	var got bytes.Buffer
	var readErr error
	go func() {
		defer wg.Done()
		var off int64
		for off < total {
			c, err := readLog(dir, off, 3000)
			if err != nil {
				readErr = err
				return
			}
			if c.Offset != off {
				readErr = fmt.Errorf("asked for %d, got data from %d (available %d)", off, c.Offset, c.AvailableOffset)
				return
			}
			got.Write(c.Content)
			off += int64(len(c.Content))
			select {
			case progress <- off:
			default:
			}
		}
	}()
	var reader int64
	for off := 0; off < total; {
		n := min(1+rng.IntN(5000), total-off)
		if _, err := l.Write(pattern(off, n)); err != nil {
			t.Fatal(err)
		}
		off += n
		for int64(off)-reader > 32<<10 && readErr == nil {
			reader = <-progress
		}
	}
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if !bytes.Equal(got.Bytes(), pattern(0, total)) {
		t.Fatalf("follower got %d bytes, not the %d written in order", got.Len(), total)
	}
	segs, _ := listSegments(dir)
	if len(segs) != 16 || segs[0].Base == 0 {
		t.Fatalf("expected rotation to have dropped old segments, have %d starting at %d", len(segs), segs[0].Base)
	}
}

func TestLogHandler(t *testing.T) {
	root := t.TempDir()
	logs := newLogSet(root, 1<<20, 2)
	l, err := logs.acquire("inst-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write([]byte("hello world")); err != nil {
		t.Fatal(err)
	}
	logs.release("inst-1", l)
	srv := httptest.NewServer(logHandler(logs, []string{"s3cret"}, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	tests := []struct {
		name, path, token string
		wantCode          int
		wantContent       string
		wantAvail, wantTS int64
	}{
		{"no token", "/logs/inst-1", "", 401, "", 0, 0},
		{"wrong token", "/logs/inst-1", "nope", 401, "", 0, 0},
		{"whole log", "/logs/inst-1", "s3cret", 200, "hello world", 0, 11},
		{"offset and limit", "/logs/inst-1?offset=6&limit=3", "s3cret", 200, "wor", 0, 11},
		{"limit zero", "/logs/inst-1?limit=0", "s3cret", 200, "", 0, 11},
		{"unknown instance", "/logs/inst-2", "s3cret", 404, "", 0, 0},
		{"bad offset", "/logs/inst-1?offset=-1", "s3cret", 400, "", 0, 0},
		{"bad id", "/logs/..", "s3cret", 404, "", 0, 0},
		{"health needs nothing", "/health", "", 200, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if tt.wantCode != 200 || tt.path == "/health" {
				return
			}
			var lr logResponse
			if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil {
				t.Fatal(err)
			}
			content, err := base64.StdEncoding.DecodeString(lr.Content)
			if err != nil {
				t.Fatal(err)
			}
			if string(content) != tt.wantContent || lr.Size != int64(len(content)) ||
				lr.AvailableOffset != tt.wantAvail || lr.TotalSize != tt.wantTS {
				t.Fatalf("got %+v (%q)", lr, content)
			}
		})
	}
}

func TestLogSetSharesOneWriterPerInstance(t *testing.T) {
	logs := newLogSet(t.TempDir(), 1<<20, 2)
	a, err := logs.acquire("x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := logs.acquire("x")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("two writers for one instance")
	}
	logs.release("x", a)
	if _, err := b.Write([]byte("still open")); err != nil {
		t.Fatalf("write after one release: %v", err)
	}
	logs.release("x", b)
	if _, err := b.Write([]byte("closed")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after last release: %v, want os.ErrClosed", err)
	}
}

func TestGCLogsKeepsRecentAndLocal(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"old", "old-but-running", "recent"} {
		l, err := openSegmentLog(filepath.Join(root, id), 1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		l.Write([]byte("x"))
		l.Close()
		mtime := now.Add(-100 * time.Hour)
		if id == "recent" {
			mtime = now.Add(-time.Hour)
		}
		if err := os.Chtimes(filepath.Join(root, id, segmentName(0)), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := gcLogs(root, now.Add(-72*time.Hour), map[string]bool{"old-but-running": true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(removed) != "[old]" {
		t.Fatalf("removed %v, want [old]", removed)
	}
	for _, id := range []string{"old-but-running", "recent"} {
		if _, err := os.Stat(filepath.Join(root, id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}
