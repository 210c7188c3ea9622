// Package logfmt builds the *slog.Logger of tide's long-running commands
// (head, worker, up, kube, fleet coordinator and shard, provider plugins) from
// their --log-level and --log-format flags.
//
// Both formats carry the same keys, so a log pipeline can rely on them:
// time, level, msg, then component (which part of the process: head,
// controller, worker, ...) and pool where the message concerns one, then the
// message's own attributes. A key set twice by nested loggers (a pool's
// controller is a component of the head) appears once, with the innermost
// value, so a JSON line never repeats a key.
package logfmt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
)

// Formats lists the accepted --log-format values.
var Formats = []string{"text", "json"}

// New returns a logger writing to w at level ("debug", "info", "warn",
// "error") in format ("text" or "json"), its records tagged with component
// (none when empty). The error names the flag at fault.
func New(w io.Writer, level, format, component string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", format)
	}
	log := slog.New(&uniqueKeys{base: h})
	if component != "" {
		log = log.With("component", component)
	}
	return log, nil
}

// uniqueKeys keeps the attributes of With calls itself, a later value of a
// key replacing the earlier one, and hands them to base with each record.
type uniqueKeys struct {
	base  slog.Handler
	attrs []slog.Attr
}

func (h *uniqueKeys) Enabled(ctx context.Context, l slog.Level) bool { return h.base.Enabled(ctx, l) }

func (h *uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	merged := slices.Clone(h.attrs)
	for _, a := range as {
		if i := slices.IndexFunc(merged, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 {
			merged[i] = a
			continue
		}
		merged = append(merged, a)
	}
	return &uniqueKeys{base: h.base, attrs: merged}
}

// WithGroup nests what follows; the attributes so far stay outside it.
func (h *uniqueKeys) WithGroup(name string) slog.Handler {
	return &uniqueKeys{base: h.base.WithAttrs(h.attrs).WithGroup(name)}
}

func (h *uniqueKeys) Handle(ctx context.Context, r slog.Record) error {
	if len(h.attrs) == 0 {
		return h.base.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return h.base.Handle(ctx, out)
}
