package store

import (
	"errors"
	"testing"
	"time"
)

// TestCredentials: a credential registers exactly its machine and pool;
// unused, it expires; used, it lasts until revoked; revocation removes
// every credential of the machine.
func TestCredentials(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	t0 := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	add := func(hash, machine string, at time.Time) {
		t.Helper()
		if err := s.AddCredential(ctx, Credential{Hash: hash, MachineID: machine, Pool: "p", CreatedAt: at, ExpiresAt: at.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	add("h1", "m1", t0)
	add("h2", "m2", t0)
	for _, tc := range []struct {
		name, hash, machine, pool string
		at                        time.Time
		ok                        bool
	}{
		{"another machine's", "h2", "m1", "p", t0, false},
		{"another pool", "h1", "m1", "q", t0, false},
		{"unknown", "hx", "m1", "p", t0, false},
		{"its own", "h1", "m1", "p", t0.Add(time.Second), true},
		{"used, after the TTL", "h1", "m1", "p", t0.Add(time.Hour), true},
		{"unused, at the TTL", "h2", "m2", "p", t0.Add(time.Minute), false},
	} {
		err := s.UseCredential(ctx, tc.hash, tc.machine, tc.pool, tc.at)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrCredential) {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// A later mint drops expired unused credentials; used ones stay.
	add("h3", "m3", t0.Add(2*time.Minute))
	if cs, _ := s.Credentials(ctx, "m2"); len(cs) != 0 {
		t.Errorf("an expired unused credential was kept: %+v", cs)
	}
	if cs, _ := s.Credentials(ctx, "m1"); len(cs) != 1 || cs[0].UsedAt.IsZero() {
		t.Errorf("the used credential: %+v", cs)
	}
	add("h4", "m1", t0.Add(2*time.Minute))
	if n, err := s.RevokeCredentials(ctx, "m1"); err != nil || n != 2 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	if err := s.UseCredential(ctx, "h1", "m1", "p", t0.Add(3*time.Minute)); !errors.Is(err, ErrCredential) {
		t.Fatalf("a revoked credential: %v", err)
	}
}
