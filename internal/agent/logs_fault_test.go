package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSegmentLogContinuesAfterDeletion: an instance's log directory deleted
// under a running instance (issue 16) does not swallow the rest of its
// output into an unlinked file: the next write starts a new segment at the
// same offset, and readers get it.
func TestSegmentLogContinuesAfterDeletion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inst")
	l, err := openSegmentLog(dir, 1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write([]byte("second\n")); err != nil {
		t.Fatalf("write after the deletion: %v", err)
	}
	c, err := readLog(dir, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Content) != "second\n" || c.AvailableOffset != 6 || c.TotalSize != 13 {
		t.Fatalf("after deletion: %+v (content %q), want offsets 6..13 and the second line", c, c.Content)
	}
}
