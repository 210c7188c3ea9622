package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/lifecycle"
)

// Lifecycle is a pool's node lifecycle section: how long a machine may take
// to launch and to register, when an unhealthy node is repaired and when
// an old one expires. Every field is optional:
//
//	lifecycle:
//	  launch_timeout: 10m          # Create → the provider reports it configured
//	  registration_timeout: 10m    # configured → its worker registered (its Node Ready)
//	  repair_after: 5m             # unhealthy this long (worker OFFLINE, Node NotReady): replaced; 0 = never
//	  max_unhealthy: "20%"         # the breaker: no repair while more of the pool is unhealthy
//	  repair_conditions: [DiskPressure]  # Kubernetes: Node conditions (True) that count as unhealthy
//	  expire_after: 720h           # older than this: replaced under the disruption budget; 0 = never
//
// Drift needs no setting: a node whose pool settings (offering, selector
// labels, provider options; in Kubernetes mode node labels and taints)
// changed since it was made is replaced under the disruption budgets of
// the pool's disruption section.
type Lifecycle struct {
	LaunchTimeout       Duration       `json:"launch_timeout,omitempty"`
	RegistrationTimeout Duration       `json:"registration_timeout,omitempty"`
	RepairAfter         Duration       `json:"repair_after,omitempty"`
	MaxUnhealthy        PercentOrCount `json:"max_unhealthy,omitempty"`
	RepairConditions    []string       `json:"repair_conditions,omitempty"`
	ExpireAfter         Duration       `json:"expire_after,omitempty"`
}

// PercentOrCount is a percentage written "20%" or 20.
type PercentOrCount string

// UnmarshalJSON reads a number or a string.
func (p *PercentOrCount) UnmarshalJSON(data []byte) error {
	var b BudgetNodes
	if err := b.UnmarshalJSON(data); err != nil {
		return errors.New(strings.Replace(err.Error(), "a count of nodes or a percentage", "a percentage", 1))
	}
	*p = PercentOrCount(b)
	return nil
}

var conditionName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,62}$`)

// LifecycleConfig returns the pool's lifecycle settings, validated, with
// its disruption budgets; launch and registration timeouts are returned
// beside (zero: the controller's defaults). Errors name the field.
func (p *Pool) LifecycleConfig() (cfg lifecycle.Config, launch, register time.Duration, err error) {
	cons, cerr := p.Consolidation()
	cfg.Disruption = cons
	l := p.Lifecycle
	if l == nil {
		return cfg, 0, 0, cerr
	}
	var errs []error
	cfg.RepairAfter, cfg.ExpireAfter = time.Duration(l.RepairAfter), time.Duration(l.ExpireAfter)
	if s := strings.TrimSpace(string(l.MaxUnhealthy)); s != "" {
		n, perr := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(s, "%")))
		if perr != nil || n < 1 || n > 100 {
			errs = append(errs, fmt.Errorf("lifecycle.max_unhealthy: want a percentage within 1%%..100%%, got %q", s))
		}
		cfg.MaxUnhealthyPercent = n
	}
	for i, c := range l.RepairConditions {
		if !conditionName.MatchString(c) || c == "Ready" {
			errs = append(errs, fmt.Errorf("lifecycle.repair_conditions[%d]: %q is not a Node condition type (Ready is always watched)", i, c))
		}
	}
	if l.LaunchTimeout > 0 && time.Duration(l.LaunchTimeout) < time.Second {
		errs = append(errs, fmt.Errorf("lifecycle.launch_timeout: must be at least 1s, got %s", time.Duration(l.LaunchTimeout)))
	}
	if l.RegistrationTimeout > 0 && time.Duration(l.RegistrationTimeout) < time.Second {
		errs = append(errs, fmt.Errorf("lifecycle.registration_timeout: must be at least 1s, got %s", time.Duration(l.RegistrationTimeout)))
	}
	return cfg, time.Duration(l.LaunchTimeout), time.Duration(l.RegistrationTimeout), errors.Join(append(errs, cerr)...)
}

// NodeHashes returns, per offering name, the hash of the pool settings that
// shape a node of that offering: the offering itself (its price aside: a
// new price changes no node), the pool's selector labels and its provider
// (type and options: image, user data, ...). extra is hashed too (Kubernetes
// mode's node labels and taints, and its join settings). A node whose
// machine records another hash has drifted.
func (p *Pool) NodeHashes(extra any) map[string]string {
	out := make(map[string]string, len(p.Offerings))
	for _, o := range p.Offerings {
		shape := o
		shape.PricePerHour, shape.InterruptionProbability, shape.InterruptionPenalty = 0, 0, 0
		data, err := json.Marshal(struct {
			Offering any               `json:"offering"`
			Selector map[string]string `json:"selector,omitempty"`
			Provider Provider          `json:"provider"`
			Extra    any               `json:"extra,omitempty"`
		}{shape, p.Selector.Labels, p.Provider, extra})
		if err != nil {
			continue // not hashable: no drift detection for it
		}
		sum := sha256.Sum256(data)
		out[o.Name()] = hex.EncodeToString(sum[:6])
	}
	return out
}
