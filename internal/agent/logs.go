package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// segmentSuffix ends every log segment's file name; the name before it is
// the segment's base offset in the instance's byte stream, zero-padded.
const segmentSuffix = ".log"

// segmentName returns the file name of the segment starting at base.
func segmentName(base int64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// segment is one log file: the bytes [Base, Base+Size) of the stream.
type segment struct {
	Base, Size int64
	Path       string
}

// listSegments returns the segments in dir by base offset. A missing dir is
// fs.ErrNotExist.
func listSegments(dir string) ([]segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	segs := make([]segment, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		num, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok || e.IsDir() {
			continue
		}
		base, err := strconv.ParseInt(num, 10, 64)
		if err != nil || base < 0 {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // rotated away while listing
		}
		if err != nil {
			return nil, fmt.Errorf("list log segments: %w", err)
		}
		segs = append(segs, segment{Base: base, Size: info.Size(), Path: filepath.Join(dir, name)})
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.Base < b.Base:
			return -1
		case a.Base > b.Base:
			return 1
		}
		return 0
	})
	return segs, nil
}

// segmentLog appends one instance's output to size-bounded segment files.
//
// Offsets are global and permanent: a segment's file name is the offset of
// its first byte, so deleting the oldest segment never shifts the others
// (PyLet numbers its files 0..n and recomputes offsets from the files
// present, so every rotation moves them, A14.12). A reader that asks for
// offset o after rotation gets exactly the bytes from o on, or, if they were
// deleted, the oldest retained byte as available_offset.
//
// Writes of all the processes of an instance go through one segmentLog, so
// a stale attempt still stopping and the new one share the stream safely.
type segmentLog struct {
	dir      string
	maxBytes int64
	maxFiles int

	mu      sync.Mutex
	cur     *os.File
	curBase int64
	curSize int64
	refs    int
}

// openSegmentLog opens (creating if needed) the log in dir and continues its
// last segment, so a restarted worker keeps the stream's offsets.
func openSegmentLog(dir string, maxBytes int64, maxFiles int) (*segmentLog, error) {
	if maxBytes <= 0 || maxFiles <= 0 {
		return nil, fmt.Errorf("open log %s: max bytes and max files must be positive", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l := &segmentLog{dir: dir, maxBytes: maxBytes, maxFiles: maxFiles}
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		l.curBase, l.curSize = last.Base, last.Size
	}
	f, err := os.OpenFile(filepath.Join(dir, segmentName(l.curBase)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l.cur = f
	return l, nil
}

// Write appends p, rotating to a new segment whenever the current one is
// full. It is safe for concurrent use.
func (l *segmentLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0, os.ErrClosed
	}
	written := 0
	if unlinked(l.cur) {
		// The segment (or the whole log directory) was deleted under a
		// running instance: continue the stream in a new segment at the
		// same offset rather than into a file no reader can open.
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	for len(p) > 0 {
		if l.curSize >= l.maxBytes {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n := min(int64(len(p)), l.maxBytes-l.curSize)
		m, err := l.cur.Write(p[:n])
		written += m
		l.curSize += int64(m)
		if err != nil {
			return written, fmt.Errorf("write log %s: %w", l.dir, err)
		}
		p = p[n:]
	}
	return written, nil
}

// rotate starts a new segment at the current end and deletes the oldest
// segments beyond maxFiles. Called with mu held.
func (l *segmentLog) rotate() error {
	base := l.curBase + l.curSize
	if err := os.MkdirAll(l.dir, 0o700); err != nil { // deleted under us
		return fmt.Errorf("rotate log %s: %w", l.dir, err)
	}
	f, err := os.OpenFile(filepath.Join(l.dir, segmentName(base)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", l.dir, err)
	}
	if err := l.cur.Close(); err != nil {
		f.Close()
		return fmt.Errorf("rotate log %s: close segment: %w", l.dir, err)
	}
	l.cur, l.curBase, l.curSize = f, base, 0
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", l.dir, err)
	}
	for len(segs) > l.maxFiles {
		if err := os.Remove(segs[0].Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate log %s: remove oldest: %w", l.dir, err)
		}
		segs = segs[1:]
	}
	return nil
}

// unlinked reports whether f's file has been deleted (no name links to it).
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// Close closes the current segment.
func (l *segmentLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return nil
	}
	err := l.cur.Close()
	l.cur = nil
	return err
}

// logChunk is a piece of an instance's stream, as the worker log server
// returns it (PyLet's shape, with content still raw).
type logChunk struct {
	// AvailableOffset is the oldest offset still on disk.
	AvailableOffset int64
	// TotalSize is the offset one past the last byte written.
	TotalSize int64
	// Offset is where Content starts: the requested offset clamped to
	// [AvailableOffset, TotalSize].
	Offset  int64
	Content []byte
}

// readLog reads up to limit bytes of the stream in dir from offset. The
// offset is clamped to what is retained. fs.ErrNotExist when dir does not
// exist. A segment deleted by a concurrent rotation is handled by reading
// again from a fresh listing.
func readLog(dir string, offset, limit int64) (logChunk, error) {
	var lastErr error
	for range 8 {
		segs, err := listSegments(dir)
		if err != nil {
			return logChunk{}, err
		}
		if len(segs) == 0 {
			return logChunk{}, nil
		}
		last := segs[len(segs)-1]
		c := logChunk{AvailableOffset: segs[0].Base, TotalSize: last.Base + last.Size}
		c.Offset = min(max(offset, c.AvailableOffset), c.TotalSize)
		want := min(max(limit, 0), c.TotalSize-c.Offset)
		c.Content = make([]byte, 0, want)
		pos := c.Offset
		ok := true
		for _, s := range segs {
			if int64(len(c.Content)) >= want {
				break
			}
			if pos >= s.Base+s.Size {
				continue
			}
			n, err := readAt(s.Path, pos-s.Base, want-int64(len(c.Content)))
			if errors.Is(err, fs.ErrNotExist) {
				ok, lastErr = false, err
				break
			}
			if err != nil {
				return logChunk{}, fmt.Errorf("read log %s: %w", dir, err)
			}
			c.Content = append(c.Content, n...)
			pos += int64(len(n))
			if pos < s.Base+s.Size {
				break // short read of a segment: return what is contiguous
			}
		}
		if ok {
			return c, nil
		}
	}
	return logChunk{}, fmt.Errorf("read log %s: segments kept rotating away: %w", dir, lastErr)
}

// readAt reads up to n bytes of the file at path from off.
func readAt(path string, off, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:m], nil
}

// gcLogs removes the logs of instances that have no local process and
// whose last write is older than cutoff. It returns the instances removed.
func gcLogs(root string, cutoff time.Time, local map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("collect old logs: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || local[e.Name()] {
			continue
		}
		dir := filepath.Join(root, e.Name())
		segs, err := listSegments(dir)
		if err != nil {
			continue
		}
		newest := time.Time{}
		for _, s := range segs {
			if info, err := os.Stat(s.Path); err == nil && info.ModTime().After(newest) {
				newest = info.ModTime()
			}
		}
		if newest.IsZero() {
			if info, err := e.Info(); err == nil {
				newest = info.ModTime()
			}
		}
		if newest.Before(cutoff) {
			if err := os.RemoveAll(dir); err != nil {
				return removed, fmt.Errorf("collect old logs: %w", err)
			}
			removed = append(removed, e.Name())
		}
	}
	return removed, nil
}

// logSet hands out one shared segmentLog per instance.
type logSet struct {
	root     string
	maxBytes int64
	maxFiles int

	mu   sync.Mutex
	open map[string]*segmentLog
}

func newLogSet(root string, maxBytes int64, maxFiles int) *logSet {
	return &logSet{root: root, maxBytes: maxBytes, maxFiles: maxFiles, open: map[string]*segmentLog{}}
}

// dir returns the directory of an instance's log.
func (s *logSet) dir(instance string) string { return filepath.Join(s.root, instance) }

// acquire returns the instance's log, opening it on first use.
func (s *logSet) acquire(instance string) (*segmentLog, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.open[instance]; ok {
		l.refs++
		return l, nil
	}
	l, err := openSegmentLog(s.dir(instance), s.maxBytes, s.maxFiles)
	if err != nil {
		return nil, err
	}
	l.refs = 1
	s.open[instance] = l
	return l, nil
}

// release drops one reference and closes the log with the last one.
func (s *logSet) release(instance string, l *segmentLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.refs--
	if l.refs > 0 {
		return
	}
	delete(s.open, instance)
	_ = l.Close() // a close error on an append-only file loses nothing already written
}
