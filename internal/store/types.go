package store

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/submit"
)

// Status is an instance's lifecycle state (PyLet's statuses, unchanged).
type Status string

// Instance statuses.
const (
	StatusPending   Status = "PENDING"
	StatusAssigned  Status = "ASSIGNED"
	StatusRunning   Status = "RUNNING"
	StatusUnknown   Status = "UNKNOWN"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
	StatusCancelled Status = "CANCELLED"
)

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Active reports whether an instance in state s holds resources on a worker.
func (s Status) Active() bool {
	return s == StatusAssigned || s == StatusRunning || s == StatusUnknown
}

// Valid reports whether s is one of the seven statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusAssigned, StatusRunning, StatusUnknown, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// WorkerStatus is a worker's liveness state.
type WorkerStatus string

// Worker statuses.
const (
	WorkerOnline  WorkerStatus = "ONLINE"
	WorkerSuspect WorkerStatus = "SUSPECT"
	WorkerOffline WorkerStatus = "OFFLINE"
)

// RestartPolicy says when a finished or lost attempt is queued again. Its
// names and its Valid method live in internal/submit, which checks them on
// submit.
type RestartPolicy = submit.RestartPolicy

// Restart policies (see internal/submit).
const (
	RestartNever     = submit.RestartNever
	RestartOnFailure = submit.RestartOnFailure
	RestartAlways    = submit.RestartAlways
)

// Failure reasons recorded on FAILED instances.
const (
	ReasonKilledByWorker  = "KILLED_BY_WORKER"
	ReasonLostAfterRejoin = "LOST_AFTER_REJOIN"
	ReasonWorkerOffline   = "WORKER_OFFLINE"
	ReasonWorkerDeleted   = "WORKER_DELETED"
)

// UnnamedName is the unique name an instance submitted without a name is
// stored under: "/" + its id. A '/' is refused in names given by users, so
// it never collides with one, and PyLet's name field reads null for it.
func UnnamedName(id string) string { return "/" + id }

// GivenName is the name the instance was submitted with; "" when none.
func (in *Instance) GivenName() string {
	if strings.HasPrefix(in.Name, "/") {
		return ""
	}
	return in.Name
}

// Instance is one row of the instances table with its current allocation.
// Zero times mean NULL.
type Instance struct {
	ID string
	// Name is unique. An instance submitted without one is stored under
	// UnnamedName(ID), which no user-given name can equal (names never
	// contain '/'); GivenName reports "" for it.
	Name    string
	Command string
	Status  Status
	// Attempt counts assignments; it increments each time the instance is
	// assigned, and reports must carry the current one.
	Attempt        int64
	AssignedWorker string
	// Pool is the node pool the instance asks for; "" is the default pool.
	Pool string
	// Requests holds CPU (millicores), memory (bytes) and the GPU count.
	Requests  capacity.Resources
	Exclusive bool
	Daemon    bool
	// Restartable says the instance may be stopped and started again on
	// another node (consolidation may move it, losing the work of its
	// current attempt). Off by default: no other instance is ever moved.
	Restartable         bool
	Labels              map[string]string
	Env                 map[string]string
	TargetWorker        string
	RequestedGPUIndices []int
	// GPUIndices are the GPUs allocated to the current attempt.
	GPUIndices    []int
	Venv          string
	ExitCode      *int
	Port          *int
	Endpoint      string
	FailureReason string
	RestartPolicy RestartPolicy
	MaxRestarts   int
	Restarts      int
	// GracePeriod is the SIGTERM→SIGKILL grace asked for by the cancel request.
	GracePeriod time.Duration
	// NotBefore holds a PENDING instance out of scheduling until then: it
	// was requeued from HeldBy, a worker declared OFFLINE that may still
	// run its previous attempt until that worker's fence stops it. Zero
	// (and HeldBy "") when nothing holds it; an assignment clears both.
	NotBefore time.Time
	HeldBy    string
	// MaxWait is the instance's own max_wait: how long it may wait
	// (PENDING, since QueuedAt) before the head fails it for want of
	// capacity. Zero: its pool's max_wait, if any, applies.
	MaxWait time.Duration
	// Priority orders placement and purchases: higher first (0 default).
	Priority int
	// GangID is set on the instances of a gang, which are placed all at
	// once or not at all: the id of the gang's rank-0 instance. GangName is
	// the gang's name as submitted, GangSize its number of instances,
	// GangRank this instance's rank (0..GangSize-1) and GangMaxWait how
	// long the gang may wait for placement before it fails whole (zero: no
	// limit).
	GangID      string
	GangName    string
	GangSize    int
	GangRank    int
	GangMaxWait time.Duration

	CreatedAt         time.Time
	QueuedAt          time.Time
	AssignedAt        time.Time
	StartedAt         time.Time
	EndedAt           time.Time
	CancelRequestedAt time.Time
	// CancelGen is the assigned worker's generation that first omitted the
	// instance from its desired set after a cancel request; a heartbeat that
	// has seen it and does not report the instance proves it is not running.
	CancelGen int64
}

// DisplayStatus is PyLet's derived status: CANCELLING while a cancel is
// requested and the instance is not terminal.
func (i *Instance) DisplayStatus() string {
	if !i.CancelRequestedAt.IsZero() && !i.Status.Terminal() {
		return "CANCELLING"
	}
	return string(i.Status)
}

// Worker is one row of the workers table.
type Worker struct {
	// ID is the worker's stable name (tide) or per-start uuid (PyLet workers).
	ID     string
	Host   string
	Pool   string
	Status WorkerStatus
	// TokenHash is the SHA-256 (hex) of the worker token issued at registration.
	TokenHash string
	BootID    string
	Capacity  capacity.Resources
	Labels    map[string]string
	// LogPort is the port of the worker's log server.
	LogPort int
	// Generation is bumped in the same transaction as every change of the
	// worker's desired set.
	Generation      int64
	Ordinal         int
	RegisteredAt    time.Time
	LastHeartbeatAt time.Time
	// CordonedAt is when the worker was cordoned (no new assignments); zero
	// when it is not.
	CordonedAt time.Time
}

// Cordoned reports whether the worker gets no new assignments.
func (w *Worker) Cordoned() bool { return !w.CordonedAt.IsZero() }

// Desired is one entry of a worker's desired set (PyLet's DesiredInstance).
type Desired struct {
	InstanceID     string
	Attempt        int64
	Command        string
	GPUIndices     []int
	Env            map[string]string
	Venv           string
	ExpectedStatus Status
	// RestartPolicy is the instance's policy; RequeuedIfLost says the head
	// would requeue this attempt (run it again elsewhere) if it declared
	// the worker OFFLINE now: not cancelled, policy on-failure or always,
	// restarts left. The worker's fence stops only those (issue 16).
	RestartPolicy  RestartPolicy
	RequeuedIfLost bool
	// GangID is the instance's gang ("" for none): the head adds the
	// gang's rendezvous variables to its environment.
	GangID string
}

// Stopping is an instance the worker must stop: cancelled, but not yet
// confirmed. It carries the grace period asked for by the cancel request.
type Stopping struct {
	InstanceID  string
	Attempt     int64
	GracePeriod time.Duration
}

// ReportStatus is what a worker says about one local process.
type ReportStatus string

// Report statuses (PyLet's InstanceReport).
const (
	ReportRunning   ReportStatus = "RUNNING"
	ReportCompleted ReportStatus = "COMPLETED"
	ReportFailed    ReportStatus = "FAILED"
	ReportCancelled ReportStatus = "CANCELLED"
	ReportNotFound  ReportStatus = "NOT_FOUND"
	ReportStopping  ReportStatus = "STOPPING"
)

// Report is one instance report carried by a heartbeat.
type Report struct {
	InstanceID string
	Attempt    int64
	Status     ReportStatus
	Port       *int
	ExitCode   *int
	// FailureReason is the worker's reason for a FAILED report (optional).
	FailureReason string
}

// Assignment places one pending instance on a worker.
type Assignment struct {
	InstanceID string
	// Attempt is the instance's attempt as read when it was PENDING; the
	// assignment applies only if it is unchanged.
	Attempt    int64
	Worker     string
	GPUIndices []int
	Exclusive  bool
}

// Errors returned by the store. Use errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrNameTaken    = errors.New("name already taken")
	ErrConflict     = errors.New("state conflict")
	ErrNotTerminal  = errors.New("instance not in a terminal state")
	ErrWorkerOnline = errors.New("worker not offline")
)

// NameTakenError reports a duplicate instance name.
type NameTakenError struct{ Name string }

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("an instance with name %q already exists", e.Name)
}

// Unwrap makes errors.Is(err, ErrNameTaken) hold.
func (e *NameTakenError) Unwrap() error { return ErrNameTaken }
