package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Options changes how a trace is read. The zero value reads strictly with
// the format detected from the header.
type Options struct {
	// Format names the format (see Formats) instead of detecting it from
	// the header. The header must still have the columns the format needs.
	Format string
	// SkipBadRows skips a data row that is malformed (bad CSV, wrong field
	// count, a non-numeric, negative or missing value, a time out of order)
	// instead of failing, and counts it in Stats with its cause. Errors in
	// the header, in the options and I/O errors still fail.
	SkipBadRows bool
	// NormalizedMachine is what a normalized request of 1.0 stands for
	// (cpu_norm, mem_norm: Google 2011 and Alibaba 2017 publish requests as
	// a fraction of their largest machine). A normalized request is used
	// when the absolute cell (cpus, mem_gb) is blank, multiplied by this and
	// rounded up. A trace with such a column fails to open unless the
	// matching dimension is set here or IgnoreNormalized is true.
	NormalizedMachine capacity.Resources
	// IgnoreNormalized leaves normalized columns unused (their dimension
	// then requests nothing) instead of requiring NormalizedMachine.
	IgnoreNormalized bool
	// GPUShareResource, when set, expresses GPU requests as thousandths of
	// a GPU in this extended resource instead of whole GPUs: gpus × 1000,
	// or gpu_milli for a 1-GPU pod that shares its GPU (alibaba-gpu2023-
	// pods). Requests.GPUs is then 0, and nodes must offer 1000 × their GPUs
	// of the resource. This ignores that a whole GPU cannot be assembled
	// from slices of two. Unset, a sharing pod holds a whole GPU and its
	// gpu_milli is kept as a label.
	GPUShareResource string
	// SplitTo, when not zero, splits every job whose request exceeds it in
	// a dimension into smaller replicas (see Job.SplitTo); set it to the
	// node shape so that multi-node jobs (Philly's 16- to 128-GPU jobs)
	// fit on a node.
	SplitTo capacity.Resources
	// DropLabels leaves Job.Labels and NodeShape.Labels nil, which saves an
	// allocation per row.
	DropLabels bool
	// Column overrides the format's value column of a rate or level series;
	// several columns joined by "+" are summed (e.g. for helios
	// "gpus_running+gpus_pending"). A generic level series needs it.
	Column string
	// BinWidth overrides the bin width of a series; zero takes the
	// format's, or infers it from the first two rows read without error.
	BinWidth time.Duration
	// AllowGaps accepts a series that skips whole bins (t_s jumps by a
	// multiple of the width) instead of failing; the missing bins are
	// counted in Stats.MissingBins. philly_active_nodes_5min.csv needs it:
	// 119 bins (10 h) after t_s 1951200 are missing from its source.
	AllowGaps bool
}

// Limits on what a cell may hold, so that arithmetic cannot overflow.
const (
	maxSeconds = 1e9     // about 31.7 years of trace time
	maxCount   = 1 << 31 // replicas, GPUs and other counts
	maxCores   = 1 << 40 // CPUs of one request
	maxGiB     = 1 << 32 // GiB of memory of one request
)

// Reader streams one trace: it holds the current CSV record only, so its
// memory does not grow with the file. Create it with Open or NewReader and
// call the Next method for its kind (Format().Kind) until io.EOF. A Reader
// is not safe for concurrent use.
type Reader struct {
	name   string
	csv    *csv.Reader
	closer io.Closer
	format Format
	opts   Options
	header []string
	stats  Stats
	line   int // line of the current record

	// job and node traces
	jc         jobColumns
	lastSubmit time.Duration

	// series
	tCol, capCol int
	valCols      []int
	width        time.Duration
	prev         time.Duration
	havePrev     bool
	skippedSince bool // a row was skipped since the last bin returned
	first, held  *Bin
}

// jobColumns holds the index of each column a job or node trace uses, -1
// when absent.
type jobColumns struct {
	id, task, submit, start, duration   int
	gpus, gpuMilli, cpus, mem           int
	cpuNorm, memNorm, replicas, pre, ae int
	labels                              []int
}

// Open opens the trace file at path, reads its header and detects its
// format (or takes opts.Format). Errors name the file. Close the Reader
// when done.
func Open(path string, opts Options) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening trace: %w", err)
	}
	r, err := NewReader(f, path, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads the header of the CSV trace in src, named name in
// errors, and detects its format (or takes opts.Format).
func NewReader(src io.Reader, name string, opts Options) (*Reader, error) {
	r := &Reader{name: name, opts: opts, csv: csv.NewReader(src)}
	r.csv.FieldsPerRecord = -1 // counted here, to name the line
	r.csv.ReuseRecord = true
	if opts.BinWidth < 0 {
		return nil, fmt.Errorf("%s: bin width: must not be negative, got %v", name, opts.BinWidth)
	}
	rec, err := r.csv.Read()
	switch {
	case errors.Is(err, io.EOF):
		return nil, &Error{File: name, Line: 1, Err: ErrEmpty}
	case err != nil:
		return nil, r.readErr(err)
	}
	r.line, _ = r.csv.FieldPos(0)
	r.header = make([]string, len(rec))
	for i, c := range rec {
		c = strings.TrimSpace(c)
		if i == 0 {
			c = strings.TrimPrefix(c, "\ufeff")
		}
		if c == "" {
			return nil, r.headerErr(i, "", fmt.Errorf("%w: empty column name", ErrSyntax))
		}
		if slices.Contains(r.header[:i], c) {
			return nil, r.headerErr(i, c, ErrDuplicateColumn)
		}
		r.header[i] = c
	}
	if opts.Format != "" {
		r.format, err = FormatByName(opts.Format)
	} else {
		r.format, err = Detect(r.header)
	}
	if err != nil {
		return nil, &Error{File: name, Line: r.line, Err: err}
	}
	if opts.Column != "" && r.format.Kind != KindRate && r.format.Kind != KindLevel {
		return nil, &Error{File: name, Line: r.line, Err: fmt.Errorf("%w: Column %q applies to rate and level series, not to %s traces", ErrNeedOption, opts.Column, r.format.Kind)}
	}
	switch r.format.Kind {
	case KindJobs:
		err = r.initJobs()
	case KindRate, KindLevel:
		err = r.initSeries()
	case KindNodes:
		err = r.initNodes()
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Format returns the trace's format.
func (r *Reader) Format() Format { return r.format }

// Header returns the trace's column names.
func (r *Reader) Header() []string { return slices.Clone(r.header) }

// Stats returns the counts so far; after io.EOF, for the whole trace.
func (r *Reader) Stats() Stats {
	s := r.stats
	s.SkippedBy = make(map[string]int, len(r.stats.SkippedBy))
	for k, v := range r.stats.SkippedBy {
		s.SkippedBy[k] = v
	}
	s.Examples = slices.Clone(r.stats.Examples)
	return s
}

// Close closes the file opened by Open; it does nothing for NewReader.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

func (r *Reader) col(name string) int { return slices.Index(r.header, name) }

func (r *Reader) headerErr(i int, name string, err error) *Error {
	return &Error{File: r.name, Line: max(r.line, 1), Column: i + 1, Name: name, Err: err}
}

func (r *Reader) missing(name, why string) *Error {
	return &Error{File: r.name, Line: r.line, Name: name, Err: fmt.Errorf("%w (%s trace: %s)", ErrMissingColumn, r.format.Name, why)}
}

// cellErr wraps a cause found in column i of the current record.
func (r *Reader) cellErr(i int, cause error) *Error {
	line := r.line
	if i >= 0 {
		line, _ = r.csv.FieldPos(i)
	}
	e := &Error{File: r.name, Line: line, Err: cause}
	if i >= 0 {
		e.Column = i + 1
		if i < len(r.header) {
			e.Name = r.header[i]
		}
	}
	return e
}

// readErr converts an error of the CSV reader.
func (r *Reader) readErr(err error) error {
	if pe, ok := errors.AsType[*csv.ParseError](err); ok {
		return &Error{File: r.name, Line: pe.Line, Err: fmt.Errorf("%w at byte %d: %w", ErrSyntax, pe.Column, pe.Err)}
	}
	return fmt.Errorf("reading %s: %w", r.name, err)
}

// record reads the next data record and checks its field count.
func (r *Reader) record() ([]string, error) {
	rec, err := r.csv.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, r.readErr(err)
	}
	r.line, _ = r.csv.FieldPos(0)
	if len(rec) != len(r.header) {
		return nil, r.cellErr(-1, fmt.Errorf("%w: %d fields, the header has %d", ErrFieldCount, len(rec), len(r.header)))
	}
	return rec, nil
}

// handle decides what to do with an error while reading rows: skip it (nil)
// or return it.
func (r *Reader) handle(err error) error {
	if r.opts.SkipBadRows && isRowError(err) {
		r.stats.skip(err)
		r.skippedSince = true
		return nil
	}
	return err
}

func (r *Reader) wrongKind(want string) error {
	return fmt.Errorf("%s: %w: %s is a %s trace, not %s", r.name, ErrWrongKind, r.format.Name, r.format.Kind, want)
}

// number parses a non-negative decimal cell. ok is false for a blank cell.
func (r *Reader) number(rec []string, i int, limit float64) (v float64, ok bool, err error) {
	if i < 0 {
		return 0, false, nil
	}
	s := strings.TrimSpace(rec[i])
	if s == "" {
		return 0, false, nil
	}
	for k := 0; k < len(s); k++ {
		if c := s[k]; (c < '0' || c > '9') && c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+' {
			return 0, false, r.cellErr(i, fmt.Errorf("%w %q", ErrNotNumber, s))
		}
	}
	neg := s[0] == '-'
	v, err = strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, false, r.cellErr(i, fmt.Errorf("%w %q", ErrNotNumber, s))
	case neg && v != 0:
		return 0, false, r.cellErr(i, fmt.Errorf("%w %q", ErrNegative, s))
	case err != nil || v > limit:
		return 0, false, r.cellErr(i, fmt.Errorf("%w: %q is above %g", ErrOutOfRange, s, limit))
	}
	return math.Abs(v), true, nil // Abs turns -0 into 0
}

// seconds parses a time or duration in seconds into a Duration, rounded to
// the nanosecond. A blank cell is an error when required.
func (r *Reader) seconds(rec []string, i int, required bool) (time.Duration, bool, error) {
	v, ok, err := r.number(rec, i, maxSeconds)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		if required {
			return 0, false, r.cellErr(i, ErrMissingValue)
		}
		return 0, false, nil
	}
	return time.Duration(math.Round(v * float64(time.Second))), true, nil
}

// amount parses a non-negative quantity (cores, GiB, a normalized share).
func (r *Reader) amount(rec []string, i int, limit float64) (float64, bool, error) {
	return r.number(rec, i, limit)
}

// count parses a non-negative whole number.
func (r *Reader) count(rec []string, i int) (int64, bool, error) {
	v, ok, err := r.number(rec, i, maxCount)
	if err != nil || !ok {
		return 0, ok, err
	}
	if v != math.Trunc(v) {
		return 0, false, r.cellErr(i, fmt.Errorf("%w %q", ErrNotWhole, strings.TrimSpace(rec[i])))
	}
	return int64(v), true, nil
}

// flag parses a 0/1 cell; blank is false.
func (r *Reader) flag(rec []string, i int) (bool, error) {
	if i < 0 {
		return false, nil
	}
	switch strings.TrimSpace(rec[i]) {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, r.cellErr(i, fmt.Errorf("%w: %q", ErrNotFlag, rec[i]))
}
