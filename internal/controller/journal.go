package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/tide-project/tide/internal/reconcile"
)

// Intent is what the controller means to do with a machine, written to the
// journal before the provider call that carries it out.
type Intent string

// The intents.
const (
	// IntentCreate: the machine is (being) created for its ordinal and is
	// to be kept. Written before Create, so a crash between the write and
	// the call leaves a record the next controller resolves.
	IntentCreate Intent = "create"
	// IntentDelete: the machine is to be deleted until the provider answers
	// NotFound. Written before the first Delete.
	IntentDelete Intent = "delete"
)

// Record is the journal's line for one machine id.
type Record struct {
	// MachineID is the provider machine id, "<pool>-<ordinal>-<serial>".
	MachineID string
	// Ordinal is the reconciler node the machine serves; -1 for a machine
	// found in the pool that no journal knew (deleted as an orphan).
	Ordinal reconcile.NodeID
	// Offering is the offering name the machine was created from.
	Offering string
	// Serial is the counter value the id was made from; of two records
	// wanting one ordinal, the higher serial wins.
	Serial uint64
	// Intent is what the controller means to do with the machine.
	Intent Intent
}

// Validate checks the record's fields; errors name the field.
func (r *Record) Validate() error {
	var errs []error
	if r.MachineID == "" {
		errs = append(errs, errors.New("machine_id: must be set"))
	}
	if r.Intent != IntentCreate && r.Intent != IntentDelete {
		errs = append(errs, fmt.Errorf("intent: want %q or %q, got %q", IntentCreate, IntentDelete, r.Intent))
	}
	if r.Intent == IntentCreate && r.Ordinal < 0 {
		errs = append(errs, fmt.Errorf("ordinal: a machine to keep needs an ordinal, got %d", r.Ordinal))
	}
	return errors.Join(errs...)
}

// JournalState is everything a Journal holds for its pool.
type JournalState struct {
	// Epoch is the highest fencing epoch handed out (0: never started).
	Epoch uint64
	// Serial is the last machine serial handed out.
	Serial uint64
	// Desired is the last desired node count the pool's reconciler held;
	// meaningful only when HasDesired is set.
	Desired    int
	HasDesired bool
	// Records holds one record per machine id, sorted by id.
	Records []Record
}

// Journal is the controller's durable memory for one pool: the fencing
// epoch, the machine serial counter, the last desired count, and one record
// per machine it has created or means to delete. The controller writes a
// record before every Create and Delete, so that whatever point it crashes
// at, the next controller on the same journal can tell its machines from
// strangers and finish what was started: nothing leaks and nothing is
// created twice.
//
// The journal is fenced like the provider: every write carries the
// writer's epoch (from RaiseEpoch), and a write with an epoch below the
// journal's is refused with an error wrapping ErrStaleEpoch and changes
// nothing, so a deposed controller can no more rewrite the journal than it
// can call the provider.
//
// Implementations must make each method atomic and durable before it
// returns, and be safe for concurrent use; RaiseEpoch must never return the
// same epoch twice. The in-memory MemJournal serves tests and the simulator;
// a store-backed one (SQLite) serves tide up.
type Journal interface {
	// Load returns the journal's state. The caller owns the returned slices.
	Load(ctx context.Context) (JournalState, error)
	// RaiseEpoch increments the epoch and returns the new value (1 or more).
	RaiseEpoch(ctx context.Context) (uint64, error)
	// NextSerial increments the serial counter and returns the new value.
	NextSerial(ctx context.Context, epoch uint64) (uint64, error)
	// Put writes the record for r.MachineID, replacing any earlier one.
	Put(ctx context.Context, epoch uint64, r Record) error
	// Remove deletes the record for machineID; removing an absent record
	// is not an error.
	Remove(ctx context.Context, epoch uint64, machineID string) error
	// SetDesired records the reconciler's desired node count.
	SetDesired(ctx context.Context, epoch uint64, desired int) error
}

// BatchJournal is an optional extension of a Journal that reserves many
// serials and writes many records in one durable write each, for a
// Provision of many machines (Config.CreateConcurrency): a journal whose
// every write is a network round trip (a ConfigMap) would otherwise take
// two per machine before its Create. Both are fenced like Journal writes.
type BatchJournal interface {
	// NextSerials advances the serial counter by n and returns the first
	// of the n new serials (the others follow it).
	NextSerials(ctx context.Context, epoch uint64, n int) (uint64, error)
	// PutAll writes every record of rs, as Put does, all or none.
	PutAll(ctx context.Context, epoch uint64, rs []Record) error
}

// ErrStaleEpoch is wrapped by the errors of Journal writes that carry an
// epoch below the journal's: the writer has been deposed.
var ErrStaleEpoch = errors.New("stale journal epoch: another controller took the pool over")

// MemJournal is a Journal in memory. It outlives any controller built on it,
// which is how tests "crash" a controller: drop it and build another on the
// same MemJournal and provider. The zero value is not usable; call
// NewMemJournal. Safe for concurrent use.
type MemJournal struct {
	mu         sync.Mutex
	epoch      uint64
	serial     uint64
	desired    int
	hasDesired bool
	records    map[string]Record
}

var (
	_ Journal      = (*MemJournal)(nil)
	_ BatchJournal = (*MemJournal)(nil)
)

// NewMemJournal returns an empty journal.
func NewMemJournal() *MemJournal { return &MemJournal{records: map[string]Record{}} }

// Load returns a copy of the journal's state.
func (j *MemJournal) Load(ctx context.Context) (JournalState, error) {
	if err := ctx.Err(); err != nil {
		return JournalState{}, fmt.Errorf("journal load: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	st := JournalState{Epoch: j.epoch, Serial: j.serial, Desired: j.desired, HasDesired: j.hasDesired,
		Records: make([]Record, 0, len(j.records))}
	for _, id := range slices.Sorted(maps.Keys(j.records)) {
		st.Records = append(st.Records, j.records[id])
	}
	return st, nil
}

// RaiseEpoch increments the epoch and returns it.
func (j *MemJournal) RaiseEpoch(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("journal raise epoch: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.epoch++
	return j.epoch, nil
}

// fenced checks a write's context and epoch; it returns with the lock held
// when the write may go ahead.
func (j *MemJournal) fenced(ctx context.Context, epoch uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j.mu.Lock()
	if epoch < j.epoch {
		cur := j.epoch
		j.mu.Unlock()
		return fmt.Errorf("epoch %d, journal is at %d: %w", epoch, cur, ErrStaleEpoch)
	}
	return nil
}

// NextSerial increments the serial counter and returns it.
func (j *MemJournal) NextSerial(ctx context.Context, epoch uint64) (uint64, error) {
	if err := j.fenced(ctx, epoch); err != nil {
		return 0, fmt.Errorf("journal next serial: %w", err)
	}
	defer j.mu.Unlock()
	j.serial++
	return j.serial, nil
}

// Put validates r and stores it.
func (j *MemJournal) Put(ctx context.Context, epoch uint64, r Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("journal put %q: %w", r.MachineID, err)
	}
	if err := j.fenced(ctx, epoch); err != nil {
		return fmt.Errorf("journal put %q: %w", r.MachineID, err)
	}
	defer j.mu.Unlock()
	j.records[r.MachineID] = r
	return nil
}

// NextSerials advances the serial counter by n and returns the first new one.
func (j *MemJournal) NextSerials(ctx context.Context, epoch uint64, n int) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("journal next serials: n: must be positive, got %d", n)
	}
	if err := j.fenced(ctx, epoch); err != nil {
		return 0, fmt.Errorf("journal next serials: %w", err)
	}
	defer j.mu.Unlock()
	first := j.serial + 1
	j.serial += uint64(n)
	return first, nil
}

// PutAll validates every record, then stores them all.
func (j *MemJournal) PutAll(ctx context.Context, epoch uint64, rs []Record) error {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return fmt.Errorf("journal put %q: %w", rs[i].MachineID, err)
		}
	}
	if err := j.fenced(ctx, epoch); err != nil {
		return fmt.Errorf("journal put all: %w", err)
	}
	defer j.mu.Unlock()
	for _, r := range rs {
		j.records[r.MachineID] = r
	}
	return nil
}

// Remove deletes the record of machineID, if any.
func (j *MemJournal) Remove(ctx context.Context, epoch uint64, machineID string) error {
	if err := j.fenced(ctx, epoch); err != nil {
		return fmt.Errorf("journal remove %q: %w", machineID, err)
	}
	defer j.mu.Unlock()
	delete(j.records, machineID)
	return nil
}

// SetDesired records the desired node count.
func (j *MemJournal) SetDesired(ctx context.Context, epoch uint64, desired int) error {
	if desired < 0 {
		return fmt.Errorf("journal set desired: desired: must not be negative, got %d", desired)
	}
	if err := j.fenced(ctx, epoch); err != nil {
		return fmt.Errorf("journal set desired: %w", err)
	}
	defer j.mu.Unlock()
	j.desired, j.hasDesired = desired, true
	return nil
}

// String lists the records, one "id ordinal intent" per line, for test
// failure messages.
func (j *MemJournal) String() string {
	st, _ := j.Load(context.Background())
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d, serial %d", st.Epoch, st.Serial)
	for _, r := range st.Records {
		fmt.Fprintf(&b, "\n%s node %d %s (%s)", r.MachineID, r.Ordinal, r.Intent, r.Offering)
	}
	return b.String()
}
