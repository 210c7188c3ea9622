package etcdstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/strictjson"
)

// Config is the fleet's configuration as the coordinator writes it once
// (InitFleet): the catalog of offerings, the provider registry and the
// initial quota of each shard.
type Config struct {
	// Offerings is the catalog: what each provider sells and the profile it
	// provides.
	Offerings []OfferingRecord `json:"offerings"`
	// Providers is the provider registry: how a shard reaches each provider
	// named by the offerings.
	Providers []ProviderSpec `json:"providers"`
	// Shards lists the shards and their initial quota.
	Shards []ShardSpec `json:"shards"`
}

// OfferingRecord is one offering of the catalog.
type OfferingRecord struct {
	Provider string            `json:"provider"`
	Profile  string            `json:"profile"`
	Offering capacity.Offering `json:"offering"`
}

// ProviderSpec is one entry of the provider registry. Config is opaque here:
// the program that builds the provider (the CLI) interprets it by Type.
type ProviderSpec struct {
	Name   string          `json:"name"`
	Type   string          `json:"type"`
	Config json.RawMessage `json:"config,omitempty"`
}

// ShardSpec declares a shard and its initial quota.
type ShardSpec struct {
	ID    uint16       `json:"id"`
	Quota []QuotaEntry `json:"quota"`
}

// QuotaEntry is a shard's allotment of one offering: how many machines of it
// the shard may hold in every state (Speculative slots included).
type QuotaEntry struct {
	Provider string `json:"provider"`
	Offering string `json:"offering"`
	Count    int    `json:"count"`
	// ReclamationPenalty is the machine-tied value lost when one of these
	// machines is reclaimed, in dollars (BigFleet §16).
	ReclamationPenalty float64 `json:"reclamation_penalty,omitempty"`
}

// ParseConfig decodes a fleet configuration strictly and validates it;
// errors name the field.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := strictjson.Decode(data, &c); err != nil {
		return Config{}, fmt.Errorf("fleet config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("fleet config: %w", err)
	}
	return c, nil
}

// Validate checks the configuration: the catalog builds, every offering's
// provider is registered, shard ids are unique and non-zero, and quota names
// offerings of the catalog. Errors name the field.
func (c *Config) Validate() error {
	cat, err := c.Catalog()
	if err != nil {
		return err
	}
	var errs []error
	providers := map[string]bool{}
	for i, p := range c.Providers {
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("providers[%d].name: must be set", i))
		}
		if p.Type == "" {
			errs = append(errs, fmt.Errorf("providers[%d].type: must be set", i))
		}
		if providers[p.Name] {
			errs = append(errs, fmt.Errorf("providers[%d].name: %q registered twice", i, p.Name))
		}
		providers[p.Name] = true
	}
	for i, o := range c.Offerings {
		if !providers[o.Provider] {
			errs = append(errs, fmt.Errorf("offerings[%d].provider: %q is not in providers", i, o.Provider))
		}
	}
	if len(c.Shards) == 0 {
		errs = append(errs, errors.New("shards: at least one shard is needed"))
	}
	seen := map[uint16]bool{}
	for i, s := range c.Shards {
		if s.ID == 0 {
			errs = append(errs, fmt.Errorf("shards[%d].id: must be 1 or more", i))
		}
		if seen[s.ID] {
			errs = append(errs, fmt.Errorf("shards[%d].id: shard %d declared twice", i, s.ID))
		}
		seen[s.ID] = true
		if err := ValidateQuota(cat, s.Quota); err != nil {
			errs = append(errs, fmt.Errorf("shards[%d].%w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Catalog builds the fleet.Catalog of the configuration's offerings.
func (c *Config) Catalog() (*fleet.Catalog, error) { return BuildCatalog(c.Offerings) }

// BuildCatalog builds a fleet.Catalog from offering records.
func BuildCatalog(offs []OfferingRecord) (*fleet.Catalog, error) {
	specs := make([]fleet.OfferingSpec, len(offs))
	for i, o := range offs {
		specs[i] = fleet.OfferingSpec{Provider: o.Provider, Profile: o.Profile, Offering: o.Offering}
	}
	return fleet.NewCatalog(specs)
}

// ValidateQuota checks quota entries against the catalog; errors name the
// field, starting at "quota".
func ValidateQuota(cat *fleet.Catalog, q []QuotaEntry) error {
	var errs []error
	seen := map[[2]string]bool{}
	for i, e := range q {
		if _, ok := cat.Offering(e.Provider, e.Offering); !ok {
			errs = append(errs, fmt.Errorf("quota[%d].offering: provider %q sells no %q", i, e.Provider, e.Offering))
		}
		if e.Count < 0 {
			errs = append(errs, fmt.Errorf("quota[%d].count: must not be negative, got %d", i, e.Count))
		}
		if e.ReclamationPenalty < 0 {
			errs = append(errs, fmt.Errorf("quota[%d].reclamation_penalty: must not be negative", i))
		}
		k := [2]string{e.Provider, e.Offering}
		if seen[k] {
			errs = append(errs, fmt.Errorf("quota[%d]: %s/%s listed twice", i, e.Provider, e.Offering))
		}
		seen[k] = true
	}
	return errors.Join(errs...)
}

// Owner is the value of a shard's ownership key: who holds the shard and
// where its API listens. The key's create revision is the holder's epoch.
type Owner struct {
	Shard   uint16 `json:"shard"`
	Holder  string `json:"holder"`
	Address string `json:"address,omitempty"`
}

// MachineRecord is a shard's record of a machine it created (the machine →
// shard assignment), written before the provider's Create so that a
// restarted controller can tell its machines from strangers.
type MachineRecord struct {
	Provider           string  `json:"provider"`
	Offering           string  `json:"offering"`
	ReclamationPenalty float64 `json:"reclamation_penalty,omitempty"`
	// DoomedBy names the directive that takes the machine out of the shard:
	// once that directive has left "pending", the machine is deleted.
	DoomedBy string `json:"doomed_by,omitempty"`
}

// ClusterRecord is a cluster's permanent assignment.
type ClusterRecord struct {
	Shard uint16 `json:"shard"`
	ID    uint32 `json:"id"`
}

// Report is what a shard publishes after its cycles (on its lease): the
// summary and shortfalls the coordinator plans with, and how far it has got
// through the directives.
type Report struct {
	Shard   uint16    `json:"shard"`
	Epoch   int64     `json:"epoch"`
	Address string    `json:"address,omitempty"`
	Cycle   uint64    `json:"cycle"`
	Updated time.Time `json:"updated"`
	// Summary is fleet.Shard.Summary.
	Summary fleet.ShardSummary `json:"summary"`
	// Shortfalls are the shard's shortfalls (at most 100); those older than
	// EscalateAfter cycles are escalated.
	Shortfalls    []fleet.Shortfall `json:"shortfalls,omitempty"`
	EscalateAfter int               `json:"escalate_after"`
	// Clusters counts the clusters that have sent needs.
	Clusters int `json:"clusters"`
	// Paused is set while new provisioning waits (etcd unreachable, lease lost).
	Paused       bool   `json:"paused,omitempty"`
	PausedReason string `json:"paused_reason,omitempty"`
	// Refused counts directives the shard refused as stale.
	Refused uint64 `json:"refused,omitempty"`

	// Revision is the report's revision when read (not stored): a report
	// newer than a directive's last step reflects that step.
	Revision int64 `json:"-"`
}

// Escalated returns the report's escalated shortfalls.
func (r *Report) Escalated() []fleet.Shortfall {
	var out []fleet.Shortfall
	for _, sf := range r.Shortfalls {
		if int(sf.Age) > r.EscalateAfter {
			out = append(out, sf)
		}
	}
	return out
}

// The states of a Directive.
const (
	// StatePending: written by the coordinator; the donor has not acted.
	StatePending = "pending"
	// StateDraining: a preemption's victims are draining on the donor.
	StateDraining = "draining"
	// StateExported: the donor has given up Exported; the recipient has not
	// taken them yet.
	StateExported = "exported"
	// StateDone: the recipient has taken the exported capacity.
	StateDone = "done"
)

// Directive is one coordinator directive (fleet.Directive) as it lives in
// etcd, with its progress. The coordinator writes it (pending) only while it
// leads; the donor and then the recipient move it forward in fenced
// transactions, so every step happens once whoever leads.
type Directive struct {
	// ID is DirectiveID(Term, Seq); ids sort in the order they were issued.
	ID       string    `json:"id"`
	Term     int64     `json:"term"`
	Seq      uint64    `json:"seq"`
	Kind     string    `json:"kind"`
	From     uint16    `json:"from"`
	To       uint16    `json:"to"`
	Profile  string    `json:"profile"`
	Count    uint32    `json:"count"`
	Priority int32     `json:"priority"`
	MinGap   int64     `json:"min_gap,omitempty"`
	State    string    `json:"state"`
	Created  time.Time `json:"created"`
	// Victims counts the machines a preemption drains.
	Victims uint32 `json:"victims,omitempty"`
	// Exported lists what the donor gave up, for the recipient's Import.
	Exported []Exported `json:"exported,omitempty"`

	// ModRevision is the record's revision when read (not stored).
	ModRevision int64 `json:"-"`
}

// Exported is one machine or quota slot leaving a donor shard. It arrives at
// the recipient as a Speculative slot: a provider machine belongs to the
// pool it was created in, so the donor deletes an Idle machine it exports
// and the recipient creates one in its own pool.
type Exported struct {
	Provider           string  `json:"provider"`
	Offering           string  `json:"offering"`
	ReclamationPenalty float64 `json:"reclamation_penalty,omitempty"`
	// WasIdle is set when the donor gave up a booted machine.
	WasIdle bool `json:"was_idle,omitempty"`
}

// DirectiveID formats a directive id: zero-padded term and sequence, so ids
// compare in issue order as strings.
func DirectiveID(term int64, seq uint64) string { return fmt.Sprintf("%020d-%020d", term, seq) }

func marshal(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

func unmarshal(key string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}
