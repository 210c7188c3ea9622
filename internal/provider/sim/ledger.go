package sim

import (
	"slices"
	"time"
)

// Why a machine stopped being billed.
const (
	EndDeleted     = "deleted"     // Delete finished
	EndInterrupted = "interrupted" // spot reclaim
	EndLost        = "lost"        // hardware loss (Cloud.Lose)
)

// Record is the ledger's line for one machine id.
type Record struct {
	MachineID string
	Pool      string
	Offering  string
	// Provisions is how many times hardware was provisioned for this id.
	// Anything but 1 is a bug: a machine created twice.
	Provisions int
	// CreateCalls counts the accepted Create calls for this id, replays
	// included (refused calls are not counted).
	CreateCalls int
	// Start is when the Create was accepted: billing starts then.
	Start time.Time
	// End is when the machine was gone (billing stopped); zero while billed.
	End time.Time
	// Ended says why the machine is gone (EndDeleted, EndInterrupted,
	// EndLost); empty while billed.
	Ended string
	// Seconds is the billed time, up to the ledger's time for a live machine.
	Seconds float64
	// Cost is Seconds at the offering's hourly price, in dollars.
	Cost float64
}

// Usage sums records.
type Usage struct {
	// Machines counts the machine ids.
	Machines int
	// Live counts those still billed.
	Live           int
	MachineSeconds float64
	Cost           float64
}

// Ledger is a snapshot of the cloud's billing at At: every machine id it
// ever provisioned, and the sums per offering. Tests read it to prove that no
// machine was created twice (Duplicates) and nothing leaked (Live).
type Ledger struct {
	At time.Time
	// Machines holds one record per machine id, sorted by id.
	Machines []Record
	// Offerings sums the records per offering name.
	Offerings map[string]Usage
}

// Duplicates returns the ids provisioned more than once, sorted.
func (l *Ledger) Duplicates() []string {
	var out []string
	for _, r := range l.Machines {
		if r.Provisions > 1 {
			out = append(out, r.MachineID)
		}
	}
	return out
}

// Live returns the ids still billed in the pool ("" for every pool), sorted.
func (l *Ledger) Live(pool string) []string {
	var out []string
	for _, r := range l.Machines {
		if r.End.IsZero() && (pool == "" || r.Pool == pool) {
			out = append(out, r.MachineID)
		}
	}
	return out
}

// Total sums every record.
func (l *Ledger) Total() Usage {
	var u Usage
	for _, r := range l.Machines {
		u.add(&r)
	}
	return u
}

func (u *Usage) add(r *Record) {
	u.Machines++
	if r.End.IsZero() {
		u.Live++
	}
	u.MachineSeconds += r.Seconds
	u.Cost += r.Cost
}

// record is the live form of a Record, owned by the cloud.
type record struct {
	Record
	price float64
}

// snapshot returns the record as billed at now.
func (r *record) snapshot(now time.Time) Record {
	out := r.Record
	end := r.End
	if end.IsZero() {
		end = now
	}
	out.Seconds = end.Sub(r.Start).Seconds()
	out.Cost = out.Seconds / 3600 * r.price
	return out
}

func buildLedger(now time.Time, recs map[string]*record) Ledger {
	l := Ledger{At: now, Machines: make([]Record, 0, len(recs)), Offerings: map[string]Usage{}}
	for _, r := range recs {
		l.Machines = append(l.Machines, r.snapshot(now))
	}
	slices.SortFunc(l.Machines, func(a, b Record) int {
		if a.MachineID < b.MachineID {
			return -1
		}
		if a.MachineID > b.MachineID {
			return 1
		}
		return 0
	})
	for i := range l.Machines {
		u := l.Offerings[l.Machines[i].Offering]
		u.add(&l.Machines[i])
		l.Offerings[l.Machines[i].Offering] = u
	}
	return l
}
