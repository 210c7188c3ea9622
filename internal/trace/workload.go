package trace

import (
	"errors"
	"io"
)

// Workload is a whole trace in memory: Jobs for a job trace, Bins for a
// rate or level series, Nodes for a node list (the other two nil).
type Workload struct {
	// Name is the file's name as given to the reader.
	Name string
	// Format is the trace's format.
	Format Format
	// Jobs holds a job trace's jobs, sorted by Submit.
	Jobs []Job
	// Bins holds a series' bins, sorted by Start.
	Bins []Bin
	// Nodes holds a node list's nodes, in file order.
	Nodes []NodeShape
	// Stats counts what was read and skipped.
	Stats Stats
}

// ReadFile reads the whole trace at path. Streaming with Open and the Next
// methods needs less memory; a workload of 100,000 jobs takes about 20 MB.
func ReadFile(path string, opts Options) (*Workload, error) {
	r, err := Open(path, opts)
	if err != nil {
		return nil, err
	}
	w, err := ReadAll(r)
	if cerr := r.Close(); err == nil && cerr != nil {
		return nil, cerr
	}
	return w, err
}

// ReadAll reads the rest of r into a Workload.
func ReadAll(r *Reader) (*Workload, error) {
	w := &Workload{Name: r.name, Format: r.Format()}
	var err error
	switch r.format.Kind {
	case KindJobs:
		w.Jobs, err = drain(r.NextJob)
	case KindRate, KindLevel:
		w.Bins, err = drain(r.NextBin)
	case KindNodes:
		w.Nodes, err = drain(r.NextNode)
	}
	if err != nil {
		return nil, err
	}
	w.Stats = r.Stats()
	return w, nil
}

func drain[T any](next func() (T, error)) ([]T, error) {
	var out []T
	for {
		v, err := next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}
