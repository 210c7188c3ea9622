package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tide-project/tide/internal/clock"
)

// ReadOptions tune ReadLogs.
type ReadOptions struct {
	// Tail, when non-nil, starts at the last *Tail bytes instead of the
	// oldest retained byte.
	Tail *int64
	// Follow keeps reading until the instance has finished (PyLet's -f).
	Follow bool
	// Poll is the wait between reads when following; 1s when zero.
	Poll time.Duration
	// Chunk is the size of one read; 1 MiB when zero.
	Chunk int64
	// OnGap is called when bytes were rotated away before they could be
	// read: [from, to) is missing from the output.
	OnGap func(from, to int64)
	// OnMove is called when the instance moved to another worker (a new
	// attempt): its log starts again from offset 0.
	OnMove func(worker string, attempt int64)
	// Clock paces following; clock.Real{} when nil.
	Clock clock.Clock
}

func terminal(status string) bool {
	return status == "COMPLETED" || status == "FAILED" || status == "CANCELLED"
}

// ReadLogs copies an instance's log to w and returns the offset after the
// last byte written. Offsets are the worker's, which survive log rotation,
// so a follower writes every byte once, in order; bytes rotated away before
// they were read are reported to OnGap, never papered over.
//
// When following, it reads until the instance has finished and the log is
// drained: the status is read before each fetch, and the worker reports an
// exit only after the process's last output is in its log.
func (c *Client) ReadLogs(ctx context.Context, id string, w io.Writer, o ReadOptions) (int64, error) {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Chunk <= 0 {
		o.Chunk = 1 << 20
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	var off int64
	started := o.Tail == nil
	worker := ""
	for {
		done := false
		if o.Follow {
			in, err := c.Instance(ctx, id)
			if err != nil {
				return off, err
			}
			done = terminal(in.Status)
			if in.AssignedTo != nil {
				if worker != "" && *in.AssignedTo != worker {
					off = 0
					if o.OnMove != nil {
						o.OnMove(*in.AssignedTo, in.Attempt)
					}
				}
				worker = *in.AssignedTo
			}
		}
		if !started {
			c0, err := c.Logs(ctx, id, 0, 0)
			if err != nil {
				if o.Follow && waitable(err) && !done {
					if err := sleep(ctx, o.Clock, o.Poll); err != nil {
						return off, err
					}
					continue
				}
				return off, err
			}
			off = max(c0.AvailableOffset, c0.TotalSize-*o.Tail)
			started = true
		}
		chunk, err := c.Logs(ctx, id, off, o.Chunk)
		switch {
		case err == nil:
		case o.Follow && waitable(err) && !done:
			if err := sleep(ctx, o.Clock, o.Poll); err != nil {
				return off, err
			}
			continue
		case done && statusOf(err) == http.StatusNotFound:
			return off, nil // finished without ever running: no log
		default:
			return off, err
		}
		if chunk.TotalSize < off {
			// A shorter stream than what was read: the log was started again
			// (the worker lost its data dir). Read it from the start.
			off = chunk.AvailableOffset
			continue
		}
		from := max(off, chunk.AvailableOffset)
		if from > off && o.OnGap != nil {
			o.OnGap(off, from)
		}
		if len(chunk.Content) > 0 {
			if _, err := w.Write(chunk.Content); err != nil {
				return off, fmt.Errorf("write logs: %w", err)
			}
		}
		off = from + int64(len(chunk.Content))
		if off < chunk.TotalSize {
			continue // more is there already
		}
		if !o.Follow || done {
			return off, nil
		}
		if err := sleep(ctx, o.Clock, o.Poll); err != nil {
			return off, err
		}
	}
}

// waitable reports errors worth waiting out while an instance is live: not
// yet assigned (404) or its worker unreachable (503).
func waitable(err error) bool {
	s := statusOf(err)
	return s == http.StatusNotFound || s == http.StatusServiceUnavailable
}

func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
