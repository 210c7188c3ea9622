package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
)

// SQLite's primary result codes that mean a damaged file.
const (
	sqliteCorrupt = 11 // SQLITE_CORRUPT
	sqliteNotADB  = 26 // SQLITE_NOTADB
)

// checkFailed turns an error of the quick_check query into Open's error:
// ErrCorrupt only when SQLite says the file is damaged. Any other failure
// (an I/O error, a full or read-only disk) is not the file's fault, and
// calling it corrupt would send a person to delete a good database; the
// error then says what the data dir's disk answers to a small write.
func checkFailed(err error, path string) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		if c := se.Code() & 0xff; c == sqliteCorrupt || c == sqliteNotADB {
			return fmt.Errorf("%w: quick_check: %v", ErrCorrupt, err)
		}
	}
	if perr := probeWrite(filepath.Dir(path)); perr != nil {
		return fmt.Errorf("cannot read the database: %w (the data dir's disk refuses writes: %v)", err, perr)
	}
	return fmt.Errorf("cannot read the database: %w", err)
}

// probeWrite writes, syncs and removes a small file in dir.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".tide-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, 64<<10))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
