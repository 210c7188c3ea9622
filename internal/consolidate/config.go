package consolidate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of a pool's disruption section (docs: README, "Consolidation").
const (
	// DefaultMaxUtilization: a node using more than half of any dimension
	// is not under-used.
	DefaultMaxUtilization = 50
	// DefaultHorizon is how long an emptied node's price counts as saved:
	// short, so that only work that started recently moves (measured on
	// the shipped traces: docs/benchmarks.md, "Consolidation").
	DefaultHorizon = 15 * time.Minute
	// DefaultEvery is how often a pool's controller looks for moves.
	DefaultEvery = time.Minute
	// DefaultBudgetPercent is the default budget: 10 % of the pool's nodes
	// (rounded up) at once, at any time (Karpenter's default).
	DefaultBudgetPercent = 10
)

// Config is a pool's consolidation: whether it runs, which nodes count as
// under-used, how the saving is counted, and the disruption budgets.
type Config struct {
	// Enabled turns consolidation on.
	Enabled bool
	// MaxUtilization is the most a candidate node may use, in percent of
	// its largest dimension (1..100).
	MaxUtilization int
	// Horizon is the time over which an emptied node's price is saved.
	Horizon time.Duration
	// Every is how often the pool's controller evaluates Decide.
	Every time.Duration
	// Budgets bound how many nodes are disrupted at once; the most
	// restrictive one active at the time wins, and when every budget has
	// windows and none is open, nothing moves.
	Budgets []Budget
	// IgnoreLostWork moves a node whatever the work lost (Karpenter's
	// rule: it weighs price only).
	IgnoreLostWork bool
}

// Budget is one disruption budget: at most Nodes nodes, or Percent % of
// the pool's nodes rounded up, disrupted at once, while one of its Windows
// is open (always when it has none).
type Budget struct {
	Nodes   int
	Percent int
	// Percentage reports whether Percent (not Nodes) applies.
	Percentage bool
	Windows    []Window
}

// Window is a daily time window in UTC: from Start after midnight, for
// Duration (which may run past midnight).
type Window struct {
	Start    time.Duration
	Duration time.Duration
}

// open reports whether the window is open at t.
func (w Window) open(t time.Time) bool {
	t = t.UTC()
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for _, day := range []time.Time{midnight, midnight.AddDate(0, 0, -1)} {
		from := day.Add(w.Start)
		if !t.Before(from) && t.Before(from.Add(w.Duration)) {
			return true
		}
	}
	return false
}

// active reports whether the budget applies at t.
func (b Budget) active(t time.Time) bool {
	if len(b.Windows) == 0 {
		return true
	}
	for _, w := range b.Windows {
		if w.open(t) {
			return true
		}
	}
	return false
}

// limit is how many of total nodes the budget lets go at once.
func (b Budget) limit(total int) int {
	if b.Percentage {
		return ceilPercent(total, b.Percent)
	}
	return b.Nodes
}

// String writes the budget as the YAML does: "10%" or "2", with windows.
func (b Budget) String() string {
	s := strconv.Itoa(b.Nodes)
	if b.Percentage {
		s = strconv.Itoa(b.Percent) + "%"
	}
	for i, w := range b.Windows {
		if i == 0 {
			s += " in "
		} else {
			s += ", "
		}
		s += fmt.Sprintf("%s+%s", clockText(w.Start), w.Duration)
	}
	return s
}

func clockText(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// allowed is the most restrictive active budget's limit at t; 0 when no
// budget is active.
func (c *Config) allowed(t time.Time, total int) int {
	best, any := 0, false
	for _, b := range c.Budgets {
		if !b.active(t) {
			continue
		}
		if l := b.limit(total); !any || l < best {
			best, any = l, true
		}
	}
	return best
}

func (c *Config) budgetText(t time.Time, total int) string {
	var parts []string
	for _, b := range c.Budgets {
		state := "closed"
		if b.active(t) {
			state = fmt.Sprintf("allows %d of %d nodes", b.limit(total), total)
		}
		parts = append(parts, "budget "+b.String()+": "+state)
	}
	if len(parts) == 0 {
		return "no budget"
	}
	return strings.Join(parts, "; ")
}

// Validate fills the defaults of the zero values (MaxUtilization 50,
// Horizon 15m, Every 1m, one budget of 10 %) and checks every field; errors
// name the field as the pool's YAML disruption section does.
func (c *Config) Validate() error {
	if c.MaxUtilization == 0 {
		c.MaxUtilization = DefaultMaxUtilization
	}
	if c.Horizon == 0 {
		c.Horizon = DefaultHorizon
	}
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	if c.Budgets == nil {
		c.Budgets = []Budget{{Percent: DefaultBudgetPercent, Percentage: true}}
	}
	var errs []error
	if c.MaxUtilization < 1 || c.MaxUtilization > 100 {
		errs = append(errs, fmt.Errorf("max_utilization: must be within 1..100, got %d", c.MaxUtilization))
	}
	if c.Horizon < 0 {
		errs = append(errs, fmt.Errorf("horizon: must not be negative, got %s", c.Horizon))
	}
	if c.Every < 0 {
		errs = append(errs, fmt.Errorf("every: must not be negative, got %s", c.Every))
	}
	for i, b := range c.Budgets {
		switch {
		case b.Percentage && (b.Percent < 0 || b.Percent > 100):
			errs = append(errs, fmt.Errorf("budgets[%d].nodes: a percentage must be within 0..100, got %d%%", i, b.Percent))
		case !b.Percentage && b.Nodes < 0:
			errs = append(errs, fmt.Errorf("budgets[%d].nodes: must not be negative, got %d", i, b.Nodes))
		}
		for j, w := range b.Windows {
			if w.Start < 0 || w.Start >= 24*time.Hour {
				errs = append(errs, fmt.Errorf("budgets[%d].windows[%d].start: must be a time of day, got %s", i, j, w.Start))
			}
			if w.Duration <= 0 || w.Duration > 24*time.Hour {
				errs = append(errs, fmt.Errorf("budgets[%d].windows[%d].duration: must be within (0, 24h], got %s", i, j, w.Duration))
			}
		}
	}
	return errors.Join(errs...)
}

// ParseNodes reads a budget's nodes: a count ("2") or a percentage
// ("10%") of the pool's nodes.
func ParseNodes(s string) (Budget, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 100 {
			return Budget{}, fmt.Errorf("want a percentage within 0%%..100%%, got %q", s)
		}
		return Budget{Percent: n, Percentage: true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return Budget{}, fmt.Errorf("want a count of nodes or a percentage such as 10%%, got %q", s)
	}
	return Budget{Nodes: n}, nil
}

// ParseClock reads a time of day "HH:MM" (UTC) as the time after midnight.
func ParseClock(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("want a time of day HH:MM (UTC), got %q", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// Karpenter returns the consolidation the karpenter peer policy models:
// under-used nodes (WhenEmptyOrUnderutilized: any use) whose work may move,
// by price alone (no lost-work test), within the default budget of 10 %,
// polled every 10 s. The restartable rule is tide's: only restartable work
// moves, as for tide's own consolidation.
func Karpenter() Config {
	c := Config{Enabled: true, MaxUtilization: 100, Every: 10 * time.Second, IgnoreLostWork: true}
	_ = c.Validate() // fills the horizon and the 10 % budget
	return c
}

// Allowed is how many of total nodes the most restrictive budget open at t
// lets be disrupted at once; 0 when none is open. Drift, expiry and
// replacement moves (internal/lifecycle) share the pool's budgets with
// consolidation.
func (c *Config) Allowed(t time.Time, total int) int { return c.allowed(t, total) }

// BudgetText says what each budget allows at t, for events and notes.
func (c *Config) BudgetText(t time.Time, total int) string { return c.budgetText(t, total) }
