package trace

import (
	"errors"
	"fmt"
	"strings"
)

// The causes of a trace error; every *Error wraps exactly one of them, so
// errors.Is tells them apart.
var (
	// ErrUnknownFormat: the header matches no format, or Options.Format names none.
	ErrUnknownFormat = errors.New("unknown trace format")
	// ErrEmpty: the file has no header line.
	ErrEmpty = errors.New("empty trace: no header line")
	// ErrMissingColumn: a column the format needs is not in the header.
	ErrMissingColumn = errors.New("missing column")
	// ErrDuplicateColumn: the header names a column twice.
	ErrDuplicateColumn = errors.New("duplicate column")
	// ErrNeedOption: the trace needs an option that was not given.
	ErrNeedOption = errors.New("option needed")
	// ErrSyntax: the line is not valid CSV.
	ErrSyntax = errors.New("csv syntax error")
	// ErrFieldCount: the row has more or fewer fields than the header.
	ErrFieldCount = errors.New("wrong number of fields")
	// ErrNotNumber: a numeric cell holds something else.
	ErrNotNumber = errors.New("not a number")
	// ErrNotWhole: a count holds a fraction.
	ErrNotWhole = errors.New("not a whole number")
	// ErrNotFlag: a 0/1 flag holds something else.
	ErrNotFlag = errors.New("not 0 or 1")
	// ErrNegative: a time, duration, amount or count is below zero.
	ErrNegative = errors.New("negative value")
	// ErrOutOfRange: a value is too large to represent, or a count is zero.
	ErrOutOfRange = errors.New("value out of range")
	// ErrMissingValue: a cell that must be filled is blank.
	ErrMissingValue = errors.New("missing value")
	// ErrUnsorted: a time is before the previous row's.
	ErrUnsorted = errors.New("times out of order")
	// ErrGap: a series skips bins or is not aligned to its bin width.
	ErrGap = errors.New("bins not contiguous")
	// ErrWrongKind: a Next method was called on a trace of another kind.
	ErrWrongKind = errors.New("wrong trace kind")
)

// rowCauses are the causes that concern one data row; with
// Options.SkipBadRows such a row is skipped and counted instead.
var rowCauses = []error{ErrSyntax, ErrFieldCount, ErrNotNumber, ErrNotWhole, ErrNotFlag, ErrNegative,
	ErrOutOfRange, ErrMissingValue, ErrUnsorted, ErrGap}

// Error is bad trace input: which file, line and column, and why.
type Error struct {
	// File is the name the reader was given (a path for Open).
	File string
	// Line is the 1-based line number; the header is line 1.
	Line int
	// Column is the 1-based column number, 0 when the error is about the
	// whole line or header.
	Column int
	// Name is the column's name from the header, "" when Column is 0 or
	// the column has no name (a field beyond the header).
	Name string
	// Err is the cause; it wraps one of the Err* variables.
	Err error
}

// Error formats the error as "file:line: column N (name): cause".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	switch {
	case e.Column > 0 && e.Name != "":
		fmt.Fprintf(&b, "column %d (%s): ", e.Column, e.Name)
	case e.Column > 0:
		fmt.Fprintf(&b, "column %d: ", e.Column)
	case e.Name != "":
		fmt.Fprintf(&b, "column %s: ", e.Name)
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// reason returns the text of the cause e wraps, used to count skipped rows.
func reason(err error) string {
	for _, c := range rowCauses {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "other"
}

// isRowError reports whether err, returned while reading data rows,
// concerns a single row (and may be skipped).
func isRowError(err error) bool {
	var te *Error
	if !errors.As(err, &te) {
		return false
	}
	for _, c := range rowCauses {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// maxExamples is how many skipped rows Stats keeps as examples.
const maxExamples = 5

// Stats counts what a reader read and, with Options.SkipBadRows, what it
// skipped and why.
type Stats struct {
	// Rows is the number of data rows returned.
	Rows int
	// Skipped is the number of data rows skipped (only with SkipBadRows).
	Skipped int
	// SkippedBy counts skipped rows by cause (the text of an Err* variable).
	SkippedBy map[string]int
	// Examples holds the errors of the first few skipped rows.
	Examples []*Error
	// Censored counts jobs whose run time the trace does not fully give.
	Censored int
	// Preexisting counts jobs that existed before the trace origin.
	Preexisting int
	// NoRequest counts jobs that request no resource at all (the source
	// has no value for any of them).
	NoRequest int
	// Split counts jobs split into smaller replicas by Options.SplitTo.
	Split int
	// MissingBins counts the bins a series skips (with AllowGaps or
	// SkipBadRows).
	MissingBins int
}

func (s *Stats) skip(err error) {
	s.Skipped++
	if s.SkippedBy == nil {
		s.SkippedBy = make(map[string]int)
	}
	s.SkippedBy[reason(err)]++
	var te *Error
	if len(s.Examples) < maxExamples && errors.As(err, &te) {
		s.Examples = append(s.Examples, te)
	}
}

// String summarises the counts, e.g. "82247 rows; skipped 2 (1 not a
// number, 1 times out of order), e.g. f.csv:7: column 4 (duration_s): ...".
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows", s.Rows)
	for _, c := range []struct {
		n    int
		what string
	}{{s.Censored, "censored"}, {s.Preexisting, "preexisting"}, {s.NoRequest, "without a request"}, {s.Split, "split"}, {s.MissingBins, "bins missing"}} {
		if c.n > 0 {
			fmt.Fprintf(&b, ", %d %s", c.n, c.what)
		}
	}
	if s.Skipped == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "; skipped %d (", s.Skipped)
	first := true
	for _, c := range rowCauses {
		if n := s.SkippedBy[c.Error()]; n > 0 {
			if !first {
				b.WriteString(", ")
			}
			first = false
			fmt.Fprintf(&b, "%d %s", n, c.Error())
		}
	}
	b.WriteString(")")
	for i, e := range s.Examples {
		if i == 0 {
			b.WriteString(", e.g. ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
