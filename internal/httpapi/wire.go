package httpapi

import (
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/submit"
)

// TimeFormat is SQLite's datetime('now') layout, UTC without zone, as PyLet
// returns timestamps.
const TimeFormat = "2006-01-02 15:04:05"

// ResourceSpec is PyLet's resource block (CPU cores, GPU count, memory
// in MiB); the type lives in internal/submit with the submit body.
type ResourceSpec = submit.ResourceSpec

// ResourcesOut is a resource block in responses (every field present).
type ResourcesOut struct {
	CPUCores float64 `json:"cpu_cores"`
	GPUUnits int64   `json:"gpu_units"`
	MemoryMB int64   `json:"memory_mb"`
}

// ResourcesFrom converts tide resources to PyLet's units.
func ResourcesFrom(r capacity.Resources) ResourcesOut {
	return ResourcesOut{CPUCores: float64(r.MilliCPU) / 1000, GPUUnits: r.GPUs, MemoryMB: r.Memory >> 20}
}

// SubmitRequest is the body of POST /instances: PyLet's fields plus tide's
// extensions. internal/submit decodes and checks it.
type SubmitRequest = submit.Request

// GangRequest is the gang field of a submit (submit.GangRequest).
type GangRequest = submit.GangRequest

// SubmitResponse is PyLet's {"instance_id"}; with replicas, every id too.
type SubmitResponse struct {
	InstanceID  string   `json:"instance_id"`
	InstanceIDs []string `json:"instance_ids,omitempty"`
}

// InstanceJSON is PyLet's instance response plus tide's extensions.
type InstanceJSON struct {
	InstanceID string `json:"instance_id"`
	// Name is the user-provided name, or null (PyLet's "or None").
	Name                    *string           `json:"name"`
	Command                 string            `json:"command"`
	Status                  string            `json:"status"`
	DisplayStatus           string            `json:"display_status"`
	Attempt                 int64             `json:"attempt"`
	AssignedTo              *string           `json:"assigned_to"`
	Endpoint                *string           `json:"endpoint"`
	Port                    *int              `json:"port"`
	ExitCode                *int              `json:"exit_code"`
	FailureReason           *string           `json:"failure_reason"`
	CreatedAt               *string           `json:"created_at"`
	AssignedAt              *string           `json:"assigned_at"`
	StartedAt               *string           `json:"started_at"`
	EndedAt                 *string           `json:"ended_at"`
	CancellationRequestedAt *string           `json:"cancellation_requested_at"`
	GPUIndices              []int             `json:"gpu_indices"`
	Exclusive               bool              `json:"exclusive"`
	Labels                  map[string]string `json:"labels"`
	Env                     map[string]string `json:"env"`
	TargetWorker            *string           `json:"target_worker"`
	Venv                    *string           `json:"venv"`
	// tide extensions
	ResourceRequirements ResourcesOut `json:"resource_requirements"`
	RestartPolicy        string       `json:"restart_policy"`
	MaxRestarts          int          `json:"max_restarts"`
	Restarts             int          `json:"restarts"`
	Pool                 string       `json:"pool"`
	Daemon               bool         `json:"daemon"`
	// Restartable is set when consolidation may move the instance; omitted
	// when false, so PyLet's shape is unchanged for other instances.
	Restartable bool `json:"restartable,omitempty"`
	// WaitingReason says why a PENDING instance is not placed yet, e.g.
	// "no pool can fit cpu 4: largest offering local-1cpu has 1"; omitted
	// when empty. Only this field is added to PyLet's shape for it.
	WaitingReason string `json:"waiting_reason,omitempty"`
	// NotBefore is when a PENDING instance requeued from an OFFLINE worker
	// may be placed again: until then that worker's fence may still be
	// stopping its previous attempt (issue 16). Omitted when nothing holds
	// it; waiting_reason says why in words.
	NotBefore *string `json:"not_before,omitempty"`
	// MaxWait is the instance's own max_wait ("30m0s"), omitted when it
	// has none (its pool's, if any, applies).
	MaxWait string `json:"max_wait,omitempty"`
	// Priority is the instance's priority; omitted when 0.
	Priority int `json:"priority,omitempty"`
	// Gang is set on the instances of a gang; omitted otherwise.
	Gang *GangJSON `json:"gang,omitempty"`
}

// GangJSON is an instance's gang: its name, size, this instance's rank
// and, when set, how long the gang may wait for placement.
type GangJSON struct {
	Name    string `json:"name"`
	Size    int    `json:"size"`
	Rank    int    `json:"rank"`
	MaxWait string `json:"max_wait,omitempty"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func timePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(TimeFormat)
	return &s
}

// InstanceFrom renders a stored instance as PyLet does.
func InstanceFrom(in *store.Instance) InstanceJSON {
	out := InstanceJSON{
		InstanceID: in.ID, Name: strPtr(in.GivenName()), Command: in.Command, Status: string(in.Status),
		DisplayStatus: in.DisplayStatus(), Attempt: in.Attempt, AssignedTo: strPtr(in.AssignedWorker),
		Endpoint: strPtr(in.Endpoint), Port: in.Port, ExitCode: in.ExitCode, FailureReason: strPtr(in.FailureReason),
		CreatedAt: timePtr(in.CreatedAt), AssignedAt: timePtr(in.AssignedAt), StartedAt: timePtr(in.StartedAt),
		EndedAt: timePtr(in.EndedAt), CancellationRequestedAt: timePtr(in.CancelRequestedAt),
		GPUIndices: in.GPUIndices, Exclusive: in.Exclusive, Labels: in.Labels, Env: in.Env,
		TargetWorker: strPtr(in.TargetWorker), Venv: strPtr(in.Venv),
		ResourceRequirements: ResourcesFrom(in.Requests), RestartPolicy: string(in.RestartPolicy),
		MaxRestarts: in.MaxRestarts, Restarts: in.Restarts, Pool: in.Pool, Daemon: in.Daemon,
		Restartable: in.Restartable,
	}
	if in.Status == store.StatusPending {
		out.NotBefore = timePtr(in.NotBefore)
	}
	if in.MaxWait > 0 {
		out.MaxWait = in.MaxWait.String()
	}
	out.Priority = in.Priority
	if in.GangID != "" {
		out.Gang = &GangJSON{Name: in.GangName, Size: in.GangSize, Rank: in.GangRank}
		if in.GangMaxWait > 0 {
			out.Gang.MaxWait = in.GangMaxWait.String()
		}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	return out
}

// RegisterRequest is the body of POST /workers (PyLet's, plus pool, labels
// and the log server port).
type RegisterRequest struct {
	WorkerID  string            `json:"worker_id"`
	Host      string            `json:"host"`
	Resources *ResourceSpec     `json:"resources"`
	BootID    string            `json:"boot_id,omitempty"`
	Pool      string            `json:"pool,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	LogPort   int               `json:"log_port,omitempty"`
}

// RegisterResponse is PyLet's registration answer.
type RegisterResponse struct {
	WorkerToken string `json:"worker_token"`
	Message     string `json:"message"`
}

// WorkerJSON is PyLet's worker response plus pool and labels. Available
// resources are what is left after every active instance (PyLet never
// decrements them, A14.7).
type WorkerJSON struct {
	WorkerID            string            `json:"worker_id"`
	Host                string            `json:"host"`
	Status              string            `json:"status"`
	TotalResources      ResourcesOut      `json:"total_resources"`
	AvailableResources  ResourcesOut      `json:"available_resources"`
	AvailableGPUIndices []int             `json:"available_gpu_indices"`
	LastSeen            *string           `json:"last_seen"`
	Pool                string            `json:"pool"`
	Labels              map[string]string `json:"labels"`
}

// WorkerView is a worker with its computed availability.
type WorkerView struct {
	Worker              *store.Worker
	Available           capacity.Resources
	AvailableGPUIndices []int
}

// WorkerFrom renders a worker view.
func WorkerFrom(v WorkerView) WorkerJSON {
	w := v.Worker
	out := WorkerJSON{WorkerID: w.ID, Host: w.Host, Status: string(w.Status), TotalResources: ResourcesFrom(w.Capacity),
		AvailableResources: ResourcesFrom(v.Available), AvailableGPUIndices: v.AvailableGPUIndices,
		LastSeen: timePtr(w.LastHeartbeatAt), Pool: w.Pool, Labels: w.Labels}
	if out.AvailableGPUIndices == nil {
		out.AvailableGPUIndices = []int{}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	return out
}

// InstanceReport is PyLet's per-instance report in a heartbeat.
type InstanceReport struct {
	InstanceID string `json:"instance_id"`
	Attempt    int64  `json:"attempt"`
	Status     string `json:"status"`
	Port       *int   `json:"port,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	// FailureReason (tide's extension) says why an instance that never
	// started did not, e.g. "venv /x/y not found on worker w1".
	FailureReason string `json:"failure_reason,omitempty"`
}

// HeartbeatRequest is PyLet's heartbeat body.
type HeartbeatRequest struct {
	WorkerToken string           `json:"worker_token"`
	BootID      string           `json:"boot_id"`
	LastSeenGen int64            `json:"last_seen_gen"`
	Instances   []InstanceReport `json:"instances"`
}

// DesiredInstance is PyLet's desired entry.
type DesiredInstance struct {
	InstanceID     string            `json:"instance_id"`
	Attempt        int64             `json:"attempt"`
	Command        string            `json:"command"`
	GPUIndices     []int             `json:"gpu_indices"`
	Env            map[string]string `json:"env"`
	Venv           *string           `json:"venv"`
	ExpectedStatus string            `json:"expected_status"`
	// RestartPolicy and RequeuedIfLost are tide's extensions (PyLet
	// workers ignore them): RequeuedIfLost says the head would run this
	// instance again elsewhere if it declared the worker OFFLINE, so the
	// worker's fence stops it once the lease has run out (HeartbeatResponse.Lease).
	RestartPolicy  string `json:"restart_policy,omitempty"`
	RequeuedIfLost bool   `json:"requeued_if_lost,omitempty"`
}

// WorkerLease is tide's extension of the heartbeat answer: what a worker
// needs to know when the head has surely declared it lost (issue 16). A
// worker whose last successful heartbeat was sent at T counts the head as
// having given up on it at T + PollTimeout + OfflineAfter +
// LivenessInterval + Margin (PollTimeout: the head may have heard one more
// heartbeat, sent when T's answer came, whose answer was lost); then it
// stops the instances marked RequeuedIfLost (SIGTERM, GracePeriod,
// SIGKILL). The head holds each instance it requeued from an OFFLINE worker
// out of scheduling until that fence is over. Absent from older heads:
// such a worker fences nothing.
type WorkerLease struct {
	PollTimeoutSeconds      float64 `json:"poll_timeout_seconds"`
	OfflineAfterSeconds     float64 `json:"offline_after_seconds"`
	LivenessIntervalSeconds float64 `json:"liveness_interval_seconds"`
	MarginSeconds           float64 `json:"margin_seconds"`
	GracePeriodSeconds      float64 `json:"grace_period_seconds"`
}

// StoppingInstance is tide's extension: an instance being cancelled, with
// the grace period before SIGKILL. PyLet workers ignore it and use theirs.
type StoppingInstance struct {
	InstanceID         string  `json:"instance_id"`
	Attempt            int64   `json:"attempt"`
	GracePeriodSeconds float64 `json:"grace_period_seconds"`
}

// HeartbeatResponse is PyLet's heartbeat answer plus the stopping list.
type HeartbeatResponse struct {
	Gen              int64              `json:"gen"`
	DesiredInstances []DesiredInstance  `json:"desired_instances"`
	Stopping         []StoppingInstance `json:"stopping,omitempty"`
	// Lease is tide's extension: the fencing lease's terms (WorkerLease).
	Lease *WorkerLease `json:"lease,omitempty"`
}

// LogChunk is the worker log server's answer, relayed by the head.
type LogChunk struct {
	AvailableOffset int64  `json:"available_offset"`
	TotalSize       int64  `json:"total_size"`
	Content         string `json:"content"`
	Size            int64  `json:"size"`
}
