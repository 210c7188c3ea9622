//go:build !unix

package head

import "os"

// flock does nothing where flock is missing: the data dir is not guarded.
func flock(*os.File) error { return nil }
