package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// walHeaderSize is the size of a write-ahead log's header (SQLite's file
// format, "WAL File Format").
const walHeaderSize = 32

// checkWAL refuses a write-ahead log beside path whose header is damaged.
// SQLite treats such a log as empty and opens the database at its last
// checkpoint without a word, so every transaction committed since (which
// synchronous=NORMAL leaves in the log until a checkpoint) would be gone
// silently: the head would start on old state and acknowledge new work
// over it. A missing log, an empty one or one shorter than a header (a log
// being reset holds no transaction) is fine.
func checkWAL(path string) error {
	f, err := os.Open(path + "-wal")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write-ahead log: %w", err)
	}
	defer f.Close()
	var h [walHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil
	} else if err != nil {
		return fmt.Errorf("write-ahead log %s-wal: %w", path, err)
	}
	if why := walHeaderDamage(h); why != "" {
		return fmt.Errorf("%w: the write-ahead log %s-wal has a damaged header (%s): SQLite would ignore it and lose "+
			"the transactions committed since the last checkpoint (restore the data dir from a backup, or move the "+
			"-wal file away to start from the last checkpoint)", ErrCorrupt, path, why)
	}
	return nil
}

// walHeaderDamage returns what is wrong with a log header, or "".
func walHeaderDamage(h [walHeaderSize]byte) string {
	var order binary.ByteOrder
	switch magic := binary.BigEndian.Uint32(h[0:]); magic {
	case 0x377f0682:
		order = binary.LittleEndian
	case 0x377f0683:
		order = binary.BigEndian
	default:
		return fmt.Sprintf("magic number %#08x", magic)
	}
	if v := binary.BigEndian.Uint32(h[4:]); v != 3007000 {
		return fmt.Sprintf("format version %d", v)
	}
	var s0, s1 uint32
	for i := 0; i < 24; i += 8 {
		s0 += order.Uint32(h[i:]) + s1
		s1 += order.Uint32(h[i+4:]) + s0
	}
	if s0 != binary.BigEndian.Uint32(h[24:]) || s1 != binary.BigEndian.Uint32(h[28:]) {
		return "checksum mismatch"
	}
	return ""
}
