// Package awsconfig reads and validates the configuration of tide's EC2
// provider (the `provider: {type: aws, ...}` block of a pool). It is a leaf
// package apart from internal/provider/aws, which re-exports its types, so
// that its fuzz target links a small program: `go test -fuzz` instruments
// every linked package for coverage, and the provider's test binary links
// the AWS SDK (see docs/reliability.md, the fuzz campaign).
package awsconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Config is the provider's configuration: the `provider: {type: aws, ...}`
// block of a pool, plus what the caller supplies at run time (UserData).
type Config struct {
	// Name is the installation this provider manages; it is the value of the
	// tide:owner tag, so two tide installations in one account never touch
	// each other's instances. Default "tide".
	Name string `json:"name,omitempty"`
	// Region is the AWS region; empty means the standard chain (AWS_REGION,
	// profile, IMDS).
	Region string `json:"region,omitempty"`
	// Endpoint overrides the AWS endpoint of every service (an emulator);
	// AWS_ENDPOINT_URL does the same from the environment.
	Endpoint string `json:"endpoint,omitempty"`

	// LaunchTemplate names an existing launch template; when empty tide
	// creates "tide-NAME" from ImageID, SecurityGroups, InstanceProfile and
	// UserData.
	LaunchTemplate string `json:"launch_template,omitempty"`
	// ImageID is the AMI of the template tide creates.
	ImageID string `json:"image_id,omitempty"`
	// SecurityGroups are the security group ids of the template tide creates.
	SecurityGroups []string `json:"security_groups,omitempty"`
	// InstanceProfile is the IAM instance profile name of the template tide creates.
	InstanceProfile string `json:"instance_profile,omitempty"`
	// WorkerDataDir is the tide directory on an instance, where its user
	// data writes the bootstrap blob (default /var/lib/tide).
	WorkerDataDir string `json:"worker_data_dir,omitempty"`
	// TideBinary is the path of the tide binary in the image (default
	// "tide", found on PATH).
	TideBinary string `json:"tide_binary,omitempty"`
	// Subnets are the subnet ids to launch into, one zone each at most; empty
	// means the default subnets of the region's default VPC.
	Subnets []string `json:"subnets,omitempty"`

	// InstanceTypes lists the instance types the pool may buy. When empty,
	// Requirements selects among the types of the shipped price table.
	InstanceTypes []string `json:"instance_types,omitempty"`
	// Requirements filters instance types by resources.
	Requirements Requirements `json:"requirements,omitzero"`
	// Capacity lists the capacity kinds to offer: on-demand, spot (default
	// on-demand only).
	Capacity []capacity.Kind `json:"capacity,omitempty"`
	// Prices overrides the shipped on-demand price table: instance type →
	// dollars per hour.
	Prices map[string]float64 `json:"prices,omitempty"`
	// SpotPrices reads spot prices with DescribeSpotPriceHistory; when false
	// (or not allowed) spot offerings are priced at SpotDiscount × on-demand.
	SpotPrices bool `json:"spot_prices,omitempty"`
	// SpotDiscount is the fraction of the on-demand price a spot offering is
	// assumed to cost when its price is not read (default 0.35).
	SpotDiscount float64 `json:"spot_discount,omitempty"`
	// SpotInterruptionProbability is the hourly interruption probability
	// given to spot offerings (default 0.05).
	SpotInterruptionProbability float64 `json:"spot_interruption_probability,omitempty"`
	// SpotInterruptionPenalty is the cost of one interruption, in dollars.
	SpotInterruptionPenalty float64 `json:"spot_interruption_penalty,omitempty"`

	// Interruptions configures the spot interruption queue; nil disables it.
	Interruptions *Interruptions `json:"interruptions,omitempty"`

	// MaxBatch is the most instances one CreateFleet launches for Creates
	// that wait on a launch of the same pool, offering and fence, and carry
	// no per-machine bootstrap (default 20; 1 launches one per call).
	MaxBatch int `json:"max_batch,omitempty"`

	// CallTimeout bounds every AWS call, retries included (default 30s).
	CallTimeout Duration `json:"call_timeout,omitzero"`
	// MaxAttempts bounds the attempts of one call under throttling or
	// transient errors (default 8).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxBackoff caps the retry backoff (default 5s).
	MaxBackoff Duration `json:"max_backoff,omitzero"`
	// SyncInterval is how often Run polls deletions and the interruption
	// queue (default 5s).
	SyncInterval Duration `json:"sync_interval,omitzero"`

	// UserData is the instance user data (the worker bootstrap, issue 10),
	// supplied by the caller rather than the configuration file; it goes
	// into the launch template tide creates.
	UserData []byte `json:"-"`
}

// Requirements selects instance types by what one node provides; zero
// fields do not filter.
type Requirements struct {
	MinVCPU      int32  `json:"min_vcpu,omitempty"`
	MaxVCPU      int32  `json:"max_vcpu,omitempty"`
	MinMemoryMiB int64  `json:"min_memory_mib,omitempty"`
	MinGPUs      int32  `json:"min_gpus,omitempty"`
	Architecture string `json:"architecture,omitempty"`
}

// Interruptions names the SQS queue that receives EC2 spot interruption
// warnings from an EventBridge rule.
type Interruptions struct {
	// Queue is the queue name; default "tide-NAME-interruptions".
	Queue string `json:"queue,omitempty"`
	// Create makes the provider create the queue and the EventBridge rule
	// (idempotently) at start.
	Create bool `json:"create,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalJSON reads "30s"-style strings.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Parse reads the JSON form of the provider block (the YAML of a pool
// converted to JSON), rejects unknown fields, applies defaults and validates.
func Parse(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("provider aws: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("provider aws: trailing data after the configuration")
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = "tide"
	}
	if c.WorkerDataDir == "" {
		c.WorkerDataDir = "/var/lib/tide"
	}
	if c.TideBinary == "" {
		c.TideBinary = "tide"
	}
	if len(c.Capacity) == 0 {
		c.Capacity = []capacity.Kind{capacity.OnDemand}
	}
	if c.SpotDiscount == 0 {
		c.SpotDiscount = 0.35
	}
	if c.SpotInterruptionProbability == 0 {
		c.SpotInterruptionProbability = 0.05
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = Duration(30 * time.Second)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 20
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 8
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = Duration(5 * time.Second)
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = Duration(5 * time.Second)
	}
	if c.Interruptions != nil && c.Interruptions.Queue == "" {
		c.Interruptions.Queue = strings.ReplaceAll("tide-"+c.Name+"-interruptions", ".", "-")
	}
	return c
}

// Validate checks the fields (after defaults); errors name the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("provider aws: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if err := tagValue(c.Name); err != nil || c.Name == "" {
		bad("name", "must be 1 to 64 letters, digits, '-', '_' or '.'")
	}
	if c.LaunchTemplate == "" && c.ImageID == "" {
		bad("image_id", "must be set when launch_template is not")
	}
	if c.LaunchTemplate != "" && (c.ImageID != "" || len(c.SecurityGroups) > 0 || c.InstanceProfile != "" || len(c.UserData) > 0) {
		bad("launch_template", "names an existing template: image_id, security_groups, instance_profile and user data belong to it")
	}
	if len(c.UserData) > 16<<10 {
		bad("user_data", "%d bytes, at most 16384 allowed by EC2", len(c.UserData))
	}
	if len(c.InstanceTypes) == 0 && c.Requirements == (Requirements{}) {
		bad("instance_types", "list instance types or set requirements")
	}
	for i, t := range c.InstanceTypes {
		if t == "" || slices.Contains(c.InstanceTypes[:i], t) {
			bad(fmt.Sprintf("instance_types[%d]", i), "%q is empty or repeated", t)
		}
	}
	for i, k := range c.Capacity {
		if k != capacity.OnDemand && k != capacity.Spot {
			bad(fmt.Sprintf("capacity[%d]", i), "%q: want on-demand or spot", k)
		}
	}
	if r := c.Requirements; r.MinVCPU < 0 || r.MaxVCPU < 0 || r.MinMemoryMiB < 0 || r.MinGPUs < 0 || r.MaxVCPU != 0 && r.MaxVCPU < r.MinVCPU {
		bad("requirements", "bounds must be non-negative and max_vcpu at least min_vcpu")
	}
	for t, v := range c.Prices {
		if v <= 0 {
			bad("prices."+t, "%v: want a positive price per hour", v)
		}
	}
	if q := c.Interruptions; q != nil && (len(q.Queue) > 80 || strings.ContainsFunc(q.Queue, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})) {
		bad("interruptions.queue", "%q: SQS allows 1 to 80 letters, digits, '-' and '_'", q.Queue)
	}
	if c.SpotDiscount <= 0 || c.SpotDiscount > 1 {
		bad("spot_discount", "%v: want a fraction in (0, 1]", c.SpotDiscount)
	}
	if c.SpotInterruptionProbability < 0 || c.SpotInterruptionProbability > 1 {
		bad("spot_interruption_probability", "%v: want a probability", c.SpotInterruptionProbability)
	}
	if c.SpotInterruptionPenalty < 0 {
		bad("spot_interruption_penalty", "must not be negative")
	}
	if c.CallTimeout <= 0 || c.MaxBackoff <= 0 || c.SyncInterval <= 0 {
		bad("call_timeout", "call_timeout, max_backoff and sync_interval must be positive")
	}
	if c.MaxBatch < 1 || c.MaxBatch > 1000 {
		bad("max_batch", "%d: want 1 to 1000", c.MaxBatch)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 50 {
		bad("max_attempts", "%d: want 1 to 50", c.MaxAttempts)
	}
	return errors.Join(errs...)
}

// tagValue checks a string used inside tag keys and values and client tokens.
func tagValue(s string) error {
	if len(s) > 64 {
		return errors.New("too long")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("bad character %q", c)
		}
	}
	return nil
}
