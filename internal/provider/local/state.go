package local

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tide-project/tide/internal/atomicfile"
	"github.com/tide-project/tide/sdk/provider"
)

// recordVersion is the version of the files this package writes.
const recordVersion = 1

// File names under the root and under a machine's directory.
const (
	lockName     = ".lock"
	uidName      = "provider.json"
	fencesName   = "fences.json"
	machinesName = "machines"
	recordName   = "machine.json"
	dataName     = "data"
	logName      = "worker.log"
)

// record is a machine's file: the machine as Get shows it, its worker
// process, or its tombstone.
type record struct {
	Version int `json:"version"`
	provider.Machine
	// PID, StartTicks and BootID identify the worker process; zero when
	// there is none.
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"start_ticks,omitempty"`
	BootID     string `json:"boot_id,omitempty"`
	// Deleted marks a tombstone: the id is used up.
	Deleted bool `json:"deleted,omitempty"`
}

// identity is the root's provider.json.
type identity struct {
	Version int    `json:"version"`
	UID     string `json:"uid"`
}

// fencesFile is the root's fences.json.
type fencesFile struct {
	Version int                       `json:"version"`
	Pools   map[string]provider.Fence `json:"pools"`
}

// writeJSON writes v to path atomically.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'))
}

// readJSON decodes path into v, refusing unknown fields.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// loadIdentity reads the root's uid, making one on first use.
func loadIdentity(root string) (string, error) {
	path := filepath.Join(root, uidName)
	var id identity
	err := readJSON(path, &id)
	switch {
	case err == nil:
		if id.Version != recordVersion || id.UID == "" {
			return "", fmt.Errorf("%s: version %d, uid %q: not a local provider identity", path, id.Version, id.UID)
		}
		return id.UID, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make uid: %w", err)
	}
	id = identity{Version: recordVersion, UID: hex.EncodeToString(b[:])}
	if err := writeJSON(path, id); err != nil {
		return "", err
	}
	return id.UID, nil
}

// loadFences reads fences.json into t and returns what it read; a missing
// file is an empty table.
func loadFences(root string, t *provider.FenceTable) (map[string]provider.Fence, error) {
	var f fencesFile
	err := readJSON(filepath.Join(root, fencesName), &f)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]provider.Fence{}, nil
	}
	if err != nil {
		return nil, err
	}
	if f.Version != recordVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", fencesName, f.Version, recordVersion)
	}
	if f.Pools == nil {
		f.Pools = map[string]provider.Fence{}
	}
	for pool, fence := range f.Pools {
		if err := t.Admit(pool, fence); err != nil {
			return nil, fmt.Errorf("%s: pool %q: %w", fencesName, pool, err)
		}
	}
	return f.Pools, nil
}

// loadRecord reads and checks one machine's record; dirName is the name of
// its directory, which must be its id.
func loadRecord(path, dirName string) (record, error) {
	var r record
	if err := readJSON(path, &r); err != nil {
		return r, err
	}
	var errs []error
	if r.Version != recordVersion {
		errs = append(errs, fmt.Errorf("version: got %d, want %d", r.Version, recordVersion))
	}
	if r.ID != dirName {
		errs = append(errs, fmt.Errorf("id: %q in the directory of %q", r.ID, dirName))
	}
	if !r.Deleted {
		if err := r.Check(); err != nil {
			errs = append(errs, err)
		}
		if r.PID < 0 || r.PID == 0 && r.StartTicks != 0 {
			errs = append(errs, fmt.Errorf("pid: %d with start time %d", r.PID, r.StartTicks))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// removeContents removes everything in dir but keep.
func removeContents(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
