package trace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

func (r *Reader) initSeries() error {
	r.tCol = r.col(colTime)
	if r.tCol < 0 {
		return r.missing(colTime, "a series needs the start of each bin")
	}
	value := r.format.Value
	if r.opts.Column != "" {
		value = r.opts.Column
	}
	if value == "" {
		return &Error{File: r.name, Line: r.line, Err: fmt.Errorf("%w: a %s series needs Options.Column to name its value column", ErrNeedOption, r.format.Name)}
	}
	for name := range strings.SplitSeq(value, "+") {
		name = strings.TrimSpace(name)
		i := r.col(name)
		if i < 0 {
			return r.missing(name, "the value column")
		}
		r.valCols = append(r.valCols, i)
	}
	r.capCol = -1
	if r.format.Capacity != "" {
		if r.capCol = r.col(r.format.Capacity); r.capCol < 0 {
			return r.missing(r.format.Capacity, "the capacity column")
		}
	}
	r.width = r.format.Width
	if r.opts.BinWidth > 0 {
		r.width = r.opts.BinWidth
	}
	return nil
}

// NextBin returns the next bin of a rate or level series, io.EOF after the
// last. Bins must start at increasing t_s, one bin width apart; the width
// is the format's, Options.BinWidth, or the difference between the first
// two rows. With SkipBadRows (the bins of skipped rows) or AllowGaps, bins
// may be missing: the next bin then starts later, still on the grid, and
// Stats.MissingBins counts the bins missing.
func (r *Reader) NextBin() (Bin, error) {
	if r.format.Kind != KindRate && r.format.Kind != KindLevel {
		return Bin{}, r.wrongKind("a rate or level series")
	}
	if r.held != nil {
		b := *r.held
		r.held = nil
		return b, nil
	}
	for {
		rec, err := r.record()
		if errors.Is(err, io.EOF) {
			if r.first != nil {
				r.first = nil
				return Bin{}, &Error{File: r.name, Line: r.line, Err: fmt.Errorf("%w: cannot infer the bin width of a %s series from one row; set Options.BinWidth", ErrNeedOption, r.format.Name)}
			}
			return Bin{}, io.EOF
		}
		var b Bin
		if err == nil {
			b, err = r.parseBin(rec)
		}
		if err == nil {
			err = r.checkBin(rec, &b)
		}
		if err != nil {
			if err = r.handle(err); err != nil {
				return Bin{}, err
			}
			continue
		}
		if r.width == 0 {
			if r.first == nil {
				r.first = &b
				continue
			}
			r.width = b.Start - r.first.Start
			first := *r.first
			r.first = nil
			first.Width, b.Width = r.width, r.width
			r.held = &b
			r.prev, r.havePrev = b.Start, true
			r.stats.Rows += 2
			r.skippedSince = false
			return first, nil
		}
		b.Width = r.width
		r.prev, r.havePrev = b.Start, true
		r.stats.Rows++
		r.skippedSince = false
		return b, nil
	}
}

func (r *Reader) parseBin(rec []string) (Bin, error) {
	var b Bin
	var err error
	if b.Start, _, err = r.seconds(rec, r.tCol, true); err != nil {
		return b, err
	}
	for _, i := range r.valCols {
		v, ok, err := r.number(rec, i, math.MaxFloat64)
		if err != nil {
			return b, err
		}
		if !ok {
			return b, r.cellErr(i, ErrMissingValue)
		}
		b.Value += v
	}
	if math.IsInf(b.Value, 0) {
		return b, r.cellErr(r.valCols[0], fmt.Errorf("%w: the sum of %s overflows", ErrOutOfRange, r.format.Value))
	}
	if r.capCol >= 0 {
		v, ok, err := r.number(rec, r.capCol, math.MaxFloat64)
		if err != nil {
			return b, err
		}
		if !ok {
			return b, r.cellErr(r.capCol, ErrMissingValue)
		}
		b.Capacity = v
	}
	return b, nil
}

// checkBin checks that b follows the previous bin (or the held first one).
func (r *Reader) checkBin(rec []string, b *Bin) error {
	prev, have := r.prev, r.havePrev
	if r.first != nil {
		prev, have = r.first.Start, true
	}
	if !have {
		return nil
	}
	if b.Start <= prev {
		return r.cellErr(r.tCol, fmt.Errorf("%w: %s %q is not after the previous bin's %gs", ErrUnsorted, colTime, rec[r.tCol], prev.Seconds()))
	}
	if r.width == 0 || b.Start == prev+r.width {
		return nil
	}
	if (r.skippedSince || r.opts.AllowGaps) && (b.Start-prev)%r.width == 0 {
		r.stats.MissingBins += int((b.Start-prev)/r.width) - 1
		return nil
	}
	if r.opts.AllowGaps {
		return r.cellErr(r.tCol, fmt.Errorf("%w: %s %q, want %gs or a later multiple of the bin width %v after it", ErrGap, colTime, rec[r.tCol], (prev+r.width).Seconds(), r.width))
	}
	return r.cellErr(r.tCol, fmt.Errorf("%w: %s %q, want %gs (bins of %v, every bin present)", ErrGap, colTime, rec[r.tCol], (prev+r.width).Seconds(), r.width))
}
