package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/consolidate"
)

// Disruption is a pool's consolidation section: whether tide may empty
// under-used nodes by moving their restartable work elsewhere, and within
// which budgets. Every field is optional:
//
//	disruption:
//	  consolidation: true        # default true; only restartable work ever moves
//	  max_utilization: 50        # a candidate node uses at most this % of any dimension
//	  horizon: 15m               # a move's saving is the node's price over this time
//	  every: 1m                  # how often the pool's controller looks
//	  budgets:                   # default [{nodes: "10%"}]; the most restrictive open one wins
//	    - nodes: "10%"           # or a count: 2
//	      windows:               # daily, UTC; none = always open
//	        - {start: "22:00", duration: 8h}
//
// When every budget has windows and none is open, nothing moves.
type Disruption struct {
	Consolidation  *bool    `json:"consolidation,omitempty"`
	MaxUtilization int      `json:"max_utilization,omitempty"`
	Horizon        Duration `json:"horizon,omitempty"`
	Every          Duration `json:"every,omitempty"`
	Budgets        []Budget `json:"budgets,omitempty"`
}

// Budget is one disruption budget of a pool's disruption section.
type Budget struct {
	// Nodes is a count (2) or a percentage of the pool's nodes ("10%").
	Nodes BudgetNodes `json:"nodes"`
	// Windows are the daily UTC windows in which the budget is open.
	Windows []Window `json:"windows,omitempty"`
}

// BudgetNodes is a budget's nodes: a number or a string such as "10%".
type BudgetNodes string

// UnmarshalJSON reads a number or a string.
func (b *BudgetNodes) UnmarshalJSON(data []byte) error {
	var s string
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
	} else {
		n, err := strconv.Atoi(string(data))
		if err != nil {
			return fmt.Errorf("want a count of nodes or a percentage such as \"10%%\", got %s", data)
		}
		s = strconv.Itoa(n)
	}
	*b = BudgetNodes(s)
	return nil
}

// Window is a daily time window: start "HH:MM" (UTC) and a duration.
type Window struct {
	Start    string   `json:"start"`
	Duration Duration `json:"duration"`
}

// Consolidation returns the pool's consolidation settings, validated,
// with the defaults documented on Disruption. A pool without the section
// consolidates with the defaults (a no-op unless instances are
// restartable).
func (p *Pool) Consolidation() (consolidate.Config, error) {
	c := consolidate.Config{Enabled: true}
	if d := p.Disruption; d != nil {
		if d.Consolidation != nil {
			c.Enabled = *d.Consolidation
		}
		c.MaxUtilization, c.Horizon, c.Every = d.MaxUtilization, time.Duration(d.Horizon), time.Duration(d.Every)
		var errs []error
		for i, b := range d.Budgets {
			out, err := consolidate.ParseNodes(string(b.Nodes))
			if err != nil {
				errs = append(errs, fmt.Errorf("disruption.budgets[%d].nodes: %w", i, err))
			}
			for j, w := range b.Windows {
				start, err := consolidate.ParseClock(w.Start)
				if err != nil {
					errs = append(errs, fmt.Errorf("disruption.budgets[%d].windows[%d].start: %w", i, j, err))
				}
				out.Windows = append(out.Windows, consolidate.Window{Start: start, Duration: time.Duration(w.Duration)})
			}
			c.Budgets = append(c.Budgets, out)
		}
		if len(errs) > 0 {
			return c, errors.Join(errs...)
		}
		if c.Budgets == nil && d.Budgets != nil {
			c.Budgets = []consolidate.Budget{} // an explicit empty list: nothing may move
		}
	}
	if err := c.Validate(); err != nil {
		var out []error
		for _, e := range splitJoined(err) {
			out = append(out, fmt.Errorf("disruption.%w", e))
		}
		return c, errors.Join(out...)
	}
	return c, nil
}
