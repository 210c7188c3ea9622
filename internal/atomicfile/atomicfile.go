// Package atomicfile replaces files so that a crash leaves the old content
// or the new one, never a mix: the state files of providers and agents.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data: a temporary file in the same
// directory, synced, renamed over path, then the directory synced. The file
// is private (0600): state files hold join tokens.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
