package providertest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tide-project/tide/sdk/provider"
)

// Result is the outcome of one conformance subtest run by Check.
type Result struct {
	// Name is the subtest's name, as in `go test -run TestConformance/Name`.
	Name string
	// Passed is false when the subtest failed; Skipped when it did not apply.
	Passed, Skipped bool
	// Messages are the subtest's failure (or skip) messages.
	Messages []string
	// Duration is how long the subtest ran.
	Duration time.Duration
}

// Check runs the conformance suite outside `go test` (for `tide provider
// test`): newHarness is called once per subtest for a fresh provider, and
// its cleanup, when not nil, after the subtest. Each subtest is bounded by
// timeout; a subtest still running then fails and is abandoned.
func Check(ctx context.Context, timeout time.Duration, newHarness func(name string) (Harness, func(), error)) []Result {
	out := make([]Result, 0, len(cases))
	for _, tc := range cases {
		res := Result{Name: tc.name, Passed: true}
		start := time.Now()
		h, cleanup, err := newHarness(tc.name)
		if err == nil && (h.Provider == nil || h.Offering == "" || h.Settle == nil) {
			err = fmt.Errorf("harness: Provider, Offering and Settle must be set")
		}
		if err != nil {
			res.Passed, res.Messages = false, []string{"harness: " + err.Error()}
			out = append(out, res)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		st := &standaloneT{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			tc.fn(st, &suite{t: st, h: h, ctx: tctx, fence: provider.Fence{Controller: "conformance", Epoch: 1}})
		}()
		select {
		case <-done:
		case <-tctx.Done():
			st.record(true, false, fmt.Sprintf("did not finish within %s", timeout))
		}
		cancel()
		if cleanup != nil {
			cleanup()
		}
		res.Duration = time.Since(start)
		res.Passed, res.Skipped, res.Messages = st.result()
		out = append(out, res)
	}
	return out
}

// standaloneT is a T outside `go test`: Fatal and Skip end the subtest's
// goroutine as testing does.
type standaloneT struct {
	mu      sync.Mutex
	failed  bool
	skipped bool
	msgs    []string
}

func (t *standaloneT) record(failed, skipped bool, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = t.failed || failed
	t.skipped = t.skipped || skipped
	t.msgs = append(t.msgs, strings.TrimSpace(msg))
}

func (t *standaloneT) result() (passed, skipped bool, msgs []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.failed, t.skipped && !t.failed, t.msgs
}

func (t *standaloneT) Helper() {}

func (t *standaloneT) Fatal(args ...any) {
	t.record(true, false, fmt.Sprint(args...))
	runtime.Goexit()
}

func (t *standaloneT) Fatalf(format string, args ...any) {
	t.record(true, false, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *standaloneT) Errorf(format string, args ...any) {
	t.record(true, false, fmt.Sprintf(format, args...))
}

func (t *standaloneT) Skip(args ...any) {
	t.record(false, true, fmt.Sprint(args...))
	runtime.Goexit()
}

// Passed reports whether every result passed (skips count as passes).
func Passed(results []Result) bool {
	for _, r := range results {
		if !r.Passed {
			return false
		}
	}
	return true
}
