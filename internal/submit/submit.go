// Package submit is the pure half of POST /instances: the body's wire form
// (Request, PyLet's fields plus tide's), its decoding with FastAPI's 422
// answers, and every check of a submit that needs no store. Check turns a
// Request into a Spec, the validated and normalized value the head then
// stores; the head keeps what needs its state (the target worker's
// existence and GPU count, the pool's existence, the insert).
//
// It is a leaf package (no store, no HTTP server, no SQLite) so that its
// fuzz test links and instruments only what decoding and checking need.
package submit

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// Limits on submitted fields.
const (
	// MaxLabelKey is the longest label key.
	MaxLabelKey = 63
	// MaxLabelValue is the longest label value.
	MaxLabelValue = 255
	// MaxReplicas is the most replicas one submit may ask for.
	MaxReplicas = 1000
	// MaxRestartsLimit is the largest max_restarts.
	MaxRestartsLimit = 10000
	// MaxNameLen is the longest instance name (and worker id).
	MaxNameLen = 253
	// MaxLabels is the most labels one submit may carry (AWS allows 50
	// tags on a resource, Kubernetes bounds the whole object; 64 is
	// above what a scheduler needs and far below what fills a store).
	MaxLabels = 64
	// MaxEnvVars is the most env variables one submit may carry.
	MaxEnvVars = 256
	// MaxEnvBytes bounds the env's keys and values summed (a quarter of
	// a typical 2 MiB ARG_MAX, which the worker's exec shares with argv).
	MaxEnvBytes = 512 << 10
	// MaxCommandBytes bounds the command (Linux refuses one argv string
	// past MAX_ARG_STRLEN, 128 KiB; the worker passes it to sh -c).
	MaxCommandBytes = 128 << 10
	// MaxWaitLimit is the longest max_wait one instance may ask for.
	MaxWaitLimit = 30 * 24 * time.Hour
)

// Defaults of a submit that leaves a field out.
const (
	// DefaultCPU is the cores an instance asks for when the request names none.
	DefaultCPU = 1
	// DefaultMemoryMB is the memory in MiB an instance asks for when the
	// request names none.
	DefaultMemoryMB = 512
	// DefaultMaxRestarts applies to a restart policy other than never when
	// max_restarts is not given.
	DefaultMaxRestarts = 3
)

// RestartPolicy says when a finished or lost attempt is queued again. The
// store's RestartPolicy is this type.
type RestartPolicy string

// Restart policies.
const (
	// RestartNever never queues an instance again (PyLet's only behaviour).
	RestartNever RestartPolicy = "never"
	// RestartOnFailure queues it again when an attempt fails or is lost.
	RestartOnFailure RestartPolicy = "on-failure"
	// RestartAlways queues it again after any exit, success included.
	RestartAlways RestartPolicy = "always"
)

// Valid reports whether p is a known policy.
func (p RestartPolicy) Valid() bool {
	return p == RestartNever || p == RestartOnFailure || p == RestartAlways
}

// ResourceSpec is PyLet's resource block: CPU cores (tide accepts
// fractions), GPU count and memory in MiB.
type ResourceSpec struct {
	CPUCores *float64 `json:"cpu_cores,omitempty"`
	GPUUnits *int64   `json:"gpu_units,omitempty"`
	MemoryMB *int64   `json:"memory_mb,omitempty"`
}

// Validate refuses amounts that cannot be meant (negative, NaN, infinite,
// past any machine: internal/validate's limits); errors name the field
// under prefix, e.g. "resource_requirements.memory_mb". ToResources cannot
// overflow on a validated spec.
func (s *ResourceSpec) Validate(prefix string) error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.CPUCores != nil {
		errs = append(errs, validate.Cores(prefix+".cpu_cores", *s.CPUCores))
	}
	if s.GPUUnits != nil {
		errs = append(errs, validate.GPUs(prefix+".gpu_units", *s.GPUUnits))
	}
	if s.MemoryMB != nil {
		errs = append(errs, validate.MemoryMB(prefix+".memory_mb", float64(*s.MemoryMB)))
	}
	return errors.Join(errs...)
}

// ToResources converts PyLet's units to tide's, applying defaults for
// missing fields.
func (s *ResourceSpec) ToResources(defCPU float64, defGPU, defMemMB int64) capacity.Resources {
	cpu, gpu, mem := defCPU, defGPU, defMemMB
	if s != nil {
		if s.CPUCores != nil {
			cpu = *s.CPUCores
		}
		if s.GPUUnits != nil {
			gpu = *s.GPUUnits
		}
		if s.MemoryMB != nil {
			mem = *s.MemoryMB
		}
	}
	return capacity.Resources{MilliCPU: int64(math.Round(cpu * 1000)), GPUs: gpu, Memory: mem << 20}
}

// Request is the body of POST /instances: PyLet's fields plus tide's
// extensions (replicas, restart policy, pool, daemon, restartable). Nil
// fields were not in the body.
type Request struct {
	Command              *string           `json:"command"`
	ResourceRequirements *ResourceSpec     `json:"resource_requirements,omitempty"`
	Name                 *string           `json:"name,omitempty"`
	TargetWorker         *string           `json:"target_worker,omitempty"`
	GPUIndices           []int             `json:"gpu_indices,omitempty"`
	Exclusive            *bool             `json:"exclusive,omitempty"`
	Labels               map[string]string `json:"labels,omitempty"`
	Env                  map[string]string `json:"env,omitempty"`
	Venv                 *string           `json:"venv,omitempty"`
	Replicas             *int              `json:"replicas,omitempty"`
	RestartPolicy        *string           `json:"restart_policy,omitempty"`
	MaxRestarts          *int              `json:"max_restarts,omitempty"`
	Pool                 *string           `json:"pool,omitempty"`
	Daemon               *bool             `json:"daemon,omitempty"`
	// Restartable lets consolidation stop the instance and start it again
	// on another node (default false: it is never moved).
	Restartable *bool `json:"restartable,omitempty"`
	// MaxWait is how long the instance may wait for capacity before it
	// ends FAILED, as a duration such as "30m" (1s to MaxWaitLimit); nil
	// leaves it to its pool's max_wait (none by default).
	MaxWait *string `json:"max_wait,omitempty"`
	// Priority orders placement, purchases and preemption: higher first
	// (default 0).
	Priority *int `json:"priority,omitempty"`
	// Gang makes the replicas one gang, placed all at once or not at all
	// (GangRequest).
	Gang *GangRequest `json:"gang,omitempty"`
}

// Error is a refused submit: the HTTP status (400) and the detail the API
// answers with.
type Error struct {
	Code   int
	Detail string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Detail) }

func bad(format string, args ...any) *Error {
	return &Error{Code: 400, Detail: fmt.Sprintf(format, args...)}
}

// Spec is a checked submit request with its defaults applied: what the
// head stores for each replica. Check guarantees every comment below.
type Spec struct {
	// Command is non-empty, without surrounding white space, at most
	// MaxCommandBytes, without NUL.
	Command string
	// Resources are the requests of one replica: validated, defaults
	// applied; GPUs is len(GPUIndices) when indices are given.
	Resources capacity.Resources
	// TargetWorker is the worker the replicas must run on ("" for any),
	// UTF-8 without control characters. Whether it exists is the head's
	// check.
	TargetWorker string
	// GPUIndices are non-negative and unique, and non-empty only with a
	// TargetWorker. Whether that worker has them is the head's check.
	GPUIndices []int
	// Labels are at most MaxLabels, with keys of 1 to MaxLabelKey bytes
	// and values of at most MaxLabelValue bytes, both UTF-8 without
	// control characters.
	Labels map[string]string
	// Env is at most MaxEnvVars variables of MaxEnvBytes in all; names
	// are non-empty without '=' or NUL, values without NUL.
	Env map[string]string
	// Venv is "" or an absolute path with no ".." element.
	Venv string
	// Replicas is between 1 and MaxReplicas.
	Replicas      int
	RestartPolicy RestartPolicy
	// MaxRestarts is between 0 and MaxRestartsLimit.
	MaxRestarts int
	// Name is "" (unnamed) or passes ValidName.
	Name string
	// Pool is the pool asked for ("" for none), UTF-8 without control
	// characters. Whether it exists is the head's check.
	Pool        string
	Exclusive   bool
	Daemon      bool
	Restartable bool
	// MaxWait is 0 (the pool's max_wait applies) or between 1s and
	// MaxWaitLimit.
	MaxWait time.Duration
	// Priority is within ±MaxPriority.
	Priority int
	// Gang is set when the replicas form a gang: Gang.Size equals
	// Replicas; its name passes ValidName or is "".
	Gang *GangSpec
}

// Check validates a submit request and returns it normalized. It runs
// every check of a submit that needs no store, in the order head.Submit
// ran them, and returns the first failure as an *Error with status 400
// (the head's checks against its state come after). A nil Command counts
// as empty (the API answers 422 before: see Decode).
func Check(req *Request) (*Spec, error) {
	s := &Spec{Replicas: 1, RestartPolicy: RestartNever}
	if req.Command != nil {
		s.Command = strings.TrimSpace(*req.Command)
	}
	if s.Command == "" {
		return nil, bad("command must not be empty")
	}
	if len(s.Command) > MaxCommandBytes {
		return nil, bad("command must be at most %d bytes, got %d", MaxCommandBytes, len(s.Command))
	}
	if strings.IndexByte(s.Command, 0) >= 0 {
		return nil, bad("command must not contain NUL")
	}
	if err := req.ResourceRequirements.Validate("resource_requirements"); err != nil {
		return nil, bad("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	s.Resources = req.ResourceRequirements.ToResources(DefaultCPU, 0, DefaultMemoryMB)
	if req.TargetWorker != nil {
		s.TargetWorker = *req.TargetWorker
		if !printable(s.TargetWorker) {
			return nil, bad("target_worker %q must be UTF-8 without control characters", s.TargetWorker)
		}
	}
	if len(req.GPUIndices) > 0 {
		if s.TargetWorker == "" {
			return nil, bad("gpu_indices requires target_worker")
		}
		seen := make(map[int]bool, len(req.GPUIndices))
		for _, g := range req.GPUIndices {
			if g < 0 {
				return nil, bad("gpu_indices must be non-negative, got %d", g)
			}
			if seen[g] {
				return nil, bad("gpu_indices must be unique, %d repeats", g)
			}
			seen[g] = true
		}
		s.Resources.GPUs = int64(len(req.GPUIndices))
	}
	s.GPUIndices = req.GPUIndices
	if len(req.Labels) > MaxLabels {
		return nil, bad("labels: at most %d, got %d", MaxLabels, len(req.Labels))
	}
	for k, v := range req.Labels {
		if k == "" || len(k) > MaxLabelKey {
			return nil, bad("label key %q must be 1 to %d characters", k, MaxLabelKey)
		}
		if len(v) > MaxLabelValue {
			return nil, bad("label value for %q exceeds %d characters", k, MaxLabelValue)
		}
		if !printable(k) {
			return nil, bad("label key %q must be UTF-8 without control characters", k)
		}
		if !printable(v) {
			return nil, bad("label value for %q must be UTF-8 without control characters", k)
		}
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	s.Labels, s.Env = req.Labels, req.Env
	if req.Venv != nil && *req.Venv != "" {
		s.Venv = *req.Venv
		if !path.IsAbs(s.Venv) {
			return nil, bad("venv must be an absolute path, got %q", s.Venv)
		}
		if slices.Contains(strings.Split(s.Venv, "/"), "..") {
			return nil, bad("venv must not contain '..', got %q", s.Venv)
		}
	}
	if req.Replicas != nil {
		s.Replicas = *req.Replicas
		if s.Replicas < 1 || s.Replicas > MaxReplicas {
			return nil, bad("replicas must be between 1 and %d, got %d", MaxReplicas, s.Replicas)
		}
	}
	if req.RestartPolicy != nil && *req.RestartPolicy != "" {
		s.RestartPolicy = RestartPolicy(*req.RestartPolicy)
		if !s.RestartPolicy.Valid() {
			return nil, bad("restart_policy must be never, on-failure or always, got %q", *req.RestartPolicy)
		}
	}
	if s.RestartPolicy != RestartNever {
		s.MaxRestarts = DefaultMaxRestarts
	}
	if req.MaxRestarts != nil {
		s.MaxRestarts = *req.MaxRestarts
		if s.MaxRestarts < 0 || s.MaxRestarts > MaxRestartsLimit {
			return nil, bad("max_restarts must be between 0 and %d, got %d", MaxRestartsLimit, s.MaxRestarts)
		}
	}
	if req.Name != nil {
		s.Name = *req.Name
		if err := ValidName(s.Name); err != nil {
			return nil, err
		}
	}
	s.Exclusive = req.Exclusive == nil || *req.Exclusive
	if req.Pool != nil {
		s.Pool = *req.Pool
		if !printable(s.Pool) {
			return nil, bad("pool %q must be UTF-8 without control characters", s.Pool)
		}
	}
	s.Daemon = req.Daemon != nil && *req.Daemon
	s.Restartable = req.Restartable != nil && *req.Restartable
	if req.MaxWait != nil {
		d, err := time.ParseDuration(*req.MaxWait)
		if err != nil || d < time.Second || d > MaxWaitLimit {
			return nil, bad("max_wait must be a duration from 1s to %s such as 30m, got %q", MaxWaitLimit, *req.MaxWait)
		}
		s.MaxWait = d
	}
	if err := checkGang(req, s); err != nil {
		return nil, err
	}
	return s, nil
}

// ValidName refuses an instance name the API could not address: empty,
// longer than MaxNameLen, with a character that ends a URL path segment
// ('/', '?', '#', '%'), with surrounding spaces, "." or "..", or one that
// is not UTF-8 or holds a control character (NUL, a newline: a name is
// printed in listings and logs, one per line). The error is an *Error
// with status 400.
func ValidName(n string) error {
	if n == "" || len(n) > MaxNameLen {
		return bad("name must be 1 to %d characters", MaxNameLen)
	}
	if strings.ContainsAny(n, "/?#%") || strings.TrimSpace(n) != n || n == "." || n == ".." {
		return bad("name %q must not contain '/', '?', '#', '%%' or surrounding spaces", n)
	}
	if !printable(n) {
		return bad("name %q must be UTF-8 without control characters", n)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without a control character
// (C0 such as NUL and newline, DEL, C1).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// checkEnv bounds the env: at most MaxEnvVars variables of MaxEnvBytes in
// all, names non-empty without '=' or NUL, values without NUL (exec
// refuses both; a newline in a value is a shell's business and allowed).
func checkEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return bad("env: at most %d variables, got %d", MaxEnvVars, len(env))
	}
	size := 0
	for k, v := range env {
		size += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("env name %q must be non-empty without '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env value for %q must not contain NUL", k)
		}
	}
	if size > MaxEnvBytes {
		return bad("env: at most %d bytes of names and values, got %d", MaxEnvBytes, size)
	}
	return nil
}
