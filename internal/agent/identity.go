package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/uuid"
	"github.com/tide-project/tide/internal/atomicfile"
)

// identity is the worker's persisted identity. UID never changes for a data
// dir; Name is the id the head knows the worker by.
type identity struct {
	UID  string `json:"uid"`
	Name string `json:"name"`
}

const identityFile = "worker.json"

// loadIdentity reads the identity in dir, creating it on first start. A
// non-empty name replaces the stored one; otherwise the stored name, or the
// UID, is kept, so a worker restarted without --name keeps its identity
// (PyLet draws a new uuid on every start, A14.4).
func loadIdentity(dir, name string) (identity, error) {
	path := filepath.Join(dir, identityFile)
	var id identity
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &id); err != nil {
			return id, fmt.Errorf("read identity %s: %w", path, err)
		}
		if id.UID == "" {
			return id, fmt.Errorf("read identity %s: uid is empty", path)
		}
	case errors.Is(err, fs.ErrNotExist):
		id.UID = uuid.NewString()
	default:
		return id, fmt.Errorf("read identity: %w", err)
	}
	changed := err != nil
	if name != "" && name != id.Name {
		id.Name, changed = name, true
	}
	if id.Name == "" {
		id.Name, changed = id.UID, true
	}
	if changed {
		if err := atomicfile.WriteFile(path, mustJSON(id)); err != nil {
			return id, fmt.Errorf("write identity: %w", err)
		}
	}
	return id, nil
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("agent: marshal %T: %v", v, err)) // only plain structs are marshalled
	}
	return append(b, '\n')
}

// lockDataDir takes an exclusive lock on dir, so two workers never share run
// records (both would adopt the same processes). The lock is released when
// the returned file is closed or the process dies.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "worker.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data dir %s: another worker is using it", dir)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	return f, nil
}
