package head

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// TestGroupCommitFailsOnlyTheBadSubmit: concurrent submits share
// transactions; a duplicate name (against the store or inside one batch)
// fails only its own submit, and every other submit is stored once.
func TestGroupCommitFailsOnlyTheBadSubmit(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	taken := "taken"
	cmd := "true"
	if _, err := e.h.Submit(ctx, &httpapi.SubmitRequest{Command: &cmd, Name: &taken}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("job-%d", i)
			switch {
			case i%16 == 0:
				name = taken // conflicts with the store
			case i%16 == 1:
				name = "twin" // conflicts inside the burst
			}
			_, errs[i] = e.h.Submit(ctx, &httpapi.SubmitRequest{Command: &cmd, Name: &name})
		}()
	}
	wg.Wait()
	twins := 0
	for i, err := range errs {
		switch {
		case i%16 == 0:
			if !errors.Is(err, store.ErrNameTaken) {
				t.Errorf("submit %d named %q: %v, want name taken", i, taken, err)
			}
		case i%16 == 1:
			if err == nil {
				twins++
			} else if !errors.Is(err, store.ErrNameTaken) {
				t.Errorf("submit %d: %v", i, err)
			}
		case err != nil:
			t.Errorf("submit %d: %v", i, err)
		}
	}
	if twins != 1 {
		t.Errorf("%d submits named twin succeeded, want exactly 1", twins)
	}
	all, err := e.h.Instances(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + n - n/16 - (n/16 - 1); len(all) != want {
		t.Fatalf("%d instances stored, want %d", len(all), want)
	}
}
