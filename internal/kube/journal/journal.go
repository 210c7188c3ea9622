// Package journal is a controller.Journal kept in a Kubernetes ConfigMap, so
// that a pool controller that takes over after its predecessor died (a
// leader-election failover) reads the epoch, serial counter, desired count
// and machine records it left, tells its machines from strangers, and
// creates nothing twice. Every change is a compare-and-swap on the
// ConfigMap's resourceVersion; writes carrying an epoch below the journal's
// are refused with controller.ErrStaleEpoch.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/kubeapi"
)

// API is the part of the Kubernetes API the journal uses; kubeapi.REST implements it.
type API interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
}

// Journal is one pool's journal in the ConfigMap Namespace/Name.
type Journal struct {
	api             API
	namespace, name string
}

var (
	_ controller.Journal      = (*Journal)(nil)
	_ controller.BatchJournal = (*Journal)(nil)
)

// New returns the journal kept in namespace/name (created on first use).
func New(api API, namespace, name string) *Journal {
	return &Journal{api: api, namespace: namespace, name: name}
}

// data is the ConfigMap's content.
type data struct {
	Epoch      uint64                       `json:"epoch"`
	Serial     uint64                       `json:"serial"`
	Desired    int                          `json:"desired"`
	HasDesired bool                         `json:"has_desired"`
	Records    map[string]controller.Record `json:"records"`
}

func (j *Journal) load(ctx context.Context) (*corev1.ConfigMap, data, error) {
	for range 5 {
		cm, err := j.api.GetConfigMap(ctx, j.namespace, j.name)
		if errors.Is(err, kubeapi.ErrNotFound) {
			cm, err = j.api.CreateConfigMap(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: j.namespace, Name: j.name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "tide"}}, Data: map[string]string{"journal": `{"records":{}}`}})
			if errors.Is(err, kubeapi.ErrExists) {
				continue
			}
		}
		if err != nil {
			return nil, data{}, err
		}
		var d data
		if err := json.Unmarshal([]byte(cm.Data["journal"]), &d); err != nil {
			return nil, data{}, fmt.Errorf("ConfigMap %s/%s: %w", j.namespace, j.name, err)
		}
		if d.Records == nil {
			d.Records = map[string]controller.Record{}
		}
		return cm, d, nil
	}
	return nil, data{}, fmt.Errorf("ConfigMap %s/%s keeps changing", j.namespace, j.name)
}

// change applies f with compare-and-swap, after checking the write's epoch
// (epoch 0: no check, for RaiseEpoch).
func (j *Journal) change(ctx context.Context, epoch uint64, f func(*data) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for range 16 {
		cm, d, err := j.load(ctx)
		if err != nil {
			return err
		}
		if epoch > 0 && epoch < d.Epoch {
			return fmt.Errorf("epoch %d, journal is at %d: %w", epoch, d.Epoch, controller.ErrStaleEpoch)
		}
		if err := f(&d); err != nil {
			return err
		}
		js, err := json.Marshal(d)
		if err != nil {
			return err
		}
		cm.Data = map[string]string{"journal": string(js)}
		if _, err := j.api.UpdateConfigMap(ctx, cm); errors.Is(err, kubeapi.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("ConfigMap %s/%s keeps changing", j.namespace, j.name)
}

// Load returns the journal's state, records sorted by machine id.
func (j *Journal) Load(ctx context.Context) (controller.JournalState, error) {
	if err := ctx.Err(); err != nil {
		return controller.JournalState{}, fmt.Errorf("journal load: %w", err)
	}
	_, d, err := j.load(ctx)
	if err != nil {
		return controller.JournalState{}, fmt.Errorf("journal load: %w", err)
	}
	st := controller.JournalState{Epoch: d.Epoch, Serial: d.Serial, Desired: d.Desired, HasDesired: d.HasDesired,
		Records: make([]controller.Record, 0, len(d.Records))}
	for _, id := range slices.Sorted(maps.Keys(d.Records)) {
		st.Records = append(st.Records, d.Records[id])
	}
	return st, nil
}

// RaiseEpoch increments the epoch and returns it; no two calls, from any
// process, get the same epoch.
func (j *Journal) RaiseEpoch(ctx context.Context) (uint64, error) {
	var got uint64
	err := j.change(ctx, 0, func(d *data) error {
		d.Epoch++
		got = d.Epoch
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("journal raise epoch: %w", err)
	}
	return got, nil
}

// NextSerial increments the serial counter and returns it.
func (j *Journal) NextSerial(ctx context.Context, epoch uint64) (uint64, error) {
	var got uint64
	err := j.change(ctx, epoch, func(d *data) error {
		d.Serial++
		got = d.Serial
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("journal next serial: %w", err)
	}
	return got, nil
}

// Put validates r and stores it.
func (j *Journal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("journal put %q: %w", r.MachineID, err)
	}
	if err := j.change(ctx, epoch, func(d *data) error {
		d.Records[r.MachineID] = r
		return nil
	}); err != nil {
		return fmt.Errorf("journal put %q: %w", r.MachineID, err)
	}
	return nil
}

// NextSerials advances the serial counter by n in one write and returns
// the first new serial (controller.BatchJournal).
func (j *Journal) NextSerials(ctx context.Context, epoch uint64, n int) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("journal next serials: n: must be positive, got %d", n)
	}
	var first uint64
	err := j.change(ctx, epoch, func(d *data) error {
		first = d.Serial + 1
		d.Serial += uint64(n)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("journal next serials: %w", err)
	}
	return first, nil
}

// PutAll validates and stores every record of rs in one write
// (controller.BatchJournal).
func (j *Journal) PutAll(ctx context.Context, epoch uint64, rs []controller.Record) error {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return fmt.Errorf("journal put %q: %w", rs[i].MachineID, err)
		}
	}
	if err := j.change(ctx, epoch, func(d *data) error {
		for _, r := range rs {
			d.Records[r.MachineID] = r
		}
		return nil
	}); err != nil {
		return fmt.Errorf("journal put all: %w", err)
	}
	return nil
}

// Remove deletes the record of machineID, if any.
func (j *Journal) Remove(ctx context.Context, epoch uint64, machineID string) error {
	if err := j.change(ctx, epoch, func(d *data) error {
		delete(d.Records, machineID)
		return nil
	}); err != nil {
		return fmt.Errorf("journal remove %q: %w", machineID, err)
	}
	return nil
}

// SetDesired records the desired node count.
func (j *Journal) SetDesired(ctx context.Context, epoch uint64, desired int) error {
	if desired < 0 {
		return fmt.Errorf("journal set desired: desired: must not be negative, got %d", desired)
	}
	if err := j.change(ctx, epoch, func(d *data) error {
		d.Desired, d.HasDesired = desired, true
		return nil
	}); err != nil {
		return fmt.Errorf("journal set desired: %w", err)
	}
	return nil
}
