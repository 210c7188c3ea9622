package controller

import (
	"context"
	"slices"
	"sync"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// launching is one machine of a concurrent Provision: its node, the
// offering picked for it, and its journaled record.
type launching struct {
	i      int // index in the Provision
	id     reconcile.NodeID
	l      *capacity.Launch
	off    capacity.Offering
	cands  []capacity.Offering
	passed []string
	rec    Record
	req    provider.CreateRequest
	err    error
}

// launchMany launches the nodes ids (ls[i] is the purchase of ids[i]) with
// up to CreateConcurrency Creates in flight, in rounds: each node still to
// launch gets its first offering not being skipped, all their records are
// journaled first (one write each for the serials and the records with a
// BatchJournal), the Creates run concurrently, and their outcomes are
// handled in order exactly as launch handles one. A node whose Create was
// refused (its offering is skipped from then on) goes to the next round,
// on its next offering. A node with no offering left to pick (a probe), or
// after a total quota, is launched one at a time by launch. It returns the
// nodes launched, in order, and why the last one not launched failed.
func (c *Controller) launchMany(ctx context.Context, ids []reconcile.NodeID, ls []*capacity.Launch) ([]reconcile.NodeID, string) {
	now := c.clock.Now()
	ok := make([]bool, len(ids))
	why := "nothing to launch"
	var slow []int
	todo := make([]int, len(ids))
	for i, id := range ids {
		todo[i] = i
		if old := c.node(id); old != nil {
			c.emit(TypeWarning, reconcile.NoteIgnored, "node %d: provision while machine %s still serves it: deleting that machine", id, old.rec.MachineID)
			c.retire(ctx, old)
		}
	}
	for round := 0; len(todo) > 0 && round <= len(c.offerings); round++ {
		var fast []*launching
		for _, i := range todo {
			if c.quotaHit != "" {
				slow = append(slow, i)
				continue
			}
			a := &launching{i: i, id: ids[i], l: ls[i], cands: c.candidates(ls[i])}
			found := false
			for _, off := range a.cands {
				if c.skipped(off.Name(), now) {
					a.passed = append(a.passed, off.Name())
					continue
				}
				a.off, found = off, true
				break
			}
			if !found {
				slow = append(slow, i)
				continue
			}
			fast = append(fast, a)
		}
		todo = nil
		if len(fast) == 0 {
			break
		}
		n, err := c.journalMany(ctx, fast)
		if err != nil {
			c.journalFailed(err, "%d nodes not launched: %v", len(fast)-n, err)
			why = "journal: " + err.Error()
			slow = nil // no more launches this Provision
		}
		fast = fast[:n]
		sem := make(chan struct{}, c.cfg.CreateConcurrency)
		var wg sync.WaitGroup
		for _, a := range fast {
			a.req = c.createRequest(&a.rec) // the fence's sequence is the controller's: taken here, in order
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, a.err = c.prov.Create(ctx, a.req)
			}()
		}
		wg.Wait()
		for _, a := range fast {
			launched, _, reason, next := c.created(ctx, a.id, a.l, a.rec, a.off, a.cands, a.passed, now, a.err)
			if c.deposed {
				return nil, reason
			}
			switch {
			case launched:
				ok[a.i] = true
			case next:
				todo = append(todo, a.i)
				why = reason
			default:
				why = reason
			}
		}
		if err != nil {
			return collect(ids, ok), why
		}
	}
	slow = append(slow, todo...)
	slices.Sort(slow)
	for _, i := range slow {
		launched, stop, reason := c.launch(ctx, ids[i], ls[i])
		if c.deposed {
			return nil, reason
		}
		ok[i] = launched
		if !launched {
			why = reason
		}
		if stop {
			break
		}
	}
	return collect(ids, ok), why
}

// collect returns the ids whose ok is set, in order.
func collect(ids []reconcile.NodeID, ok []bool) []reconcile.NodeID {
	var got []reconcile.NodeID
	for i, id := range ids {
		if ok[i] {
			got = append(got, id)
		}
	}
	return got
}

// journalMany reserves serials and writes the records of the machines to
// launch, in one write each when the journal is a BatchJournal. It returns
// how many of them (the first ones) are journaled.
func (c *Controller) journalMany(ctx context.Context, ms []*launching) (int, error) {
	record := func(a *launching, serial uint64) {
		a.rec = Record{MachineID: machineID(c.cfg.Pool, a.id, serial), Ordinal: a.id, Offering: a.off.Name(), Serial: serial, Intent: IntentCreate}
	}
	if bj, isBatch := c.journal.(BatchJournal); isBatch {
		first, err := bj.NextSerials(ctx, c.epoch, len(ms))
		if err != nil {
			return 0, err
		}
		rs := make([]Record, len(ms))
		for k, a := range ms {
			record(a, first+uint64(k))
			rs[k] = a.rec
		}
		if err := bj.PutAll(ctx, c.epoch, rs); err != nil {
			return 0, err
		}
		return len(ms), nil
	}
	for k, a := range ms {
		serial, err := c.journal.NextSerial(ctx, c.epoch)
		if err != nil {
			return k, err
		}
		record(a, serial)
		if err := c.journal.Put(ctx, c.epoch, a.rec); err != nil {
			return k, err
		}
	}
	return len(ms), nil
}
