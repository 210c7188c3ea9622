// Package agent is tide's worker (`tide worker`): it registers with the head,
// long-polls it for the worker's desired set of instances, and makes the
// local processes match it.
//
// Protocol (PyLet's, A4): a heartbeat carries the last generation the worker
// has seen and a report for every local process; the head applies the
// reports with attempt fencing and holds the request until the worker's
// desired set changes. When a local process starts or exits, the in-flight
// heartbeat is cancelled and reissued at once with the new reports.
//
// Processes are keyed by (instance, attempt):
//
//	desired, not local, expected ASSIGNED ──start──► running ──exit──► exited
//	local, not desired ──SIGTERM──► stopping ──grace──► SIGKILL ──► exited
//	exited, neither desired nor being cancelled ──► dropped (record deleted)
//
// Each instance runs as the leader of its own process group under a small
// shell wrapper that records its exit code; stopping signals the whole
// group, and the group is killed when its leader exits. Output goes through
// a FIFO into size-bounded log segments named by their offset in the
// instance's stream, so offsets survive rotation, and a log server answers
// the head's log proxy (GET /logs/{id}?offset=&limit=).
//
// Guarantees:
//   - Identity: the worker's name and uid persist in the data dir, so
//     target_worker and the head's records survive restarts.
//   - Nothing runs twice: a record (pid, start time, kernel boot id) is
//     written before and after each start; a restarted worker adopts a
//     process that is still alive (and keeps reading its output), reports
//     the exit code of one that ended meanwhile, and never starts a key the
//     head expects to be running already (it reports NOT_FOUND instead).
//   - Every local process is reported on every heartbeat until the head no
//     longer asks about it.
//   - PORT comes from a range and is bind-tested; CUDA_VISIBLE_DEVICES is
//     set to the allocated GPUs, or to "" when there are none.
//
// Time comes from an injected clock.Clock; logs go to an injected
// *slog.Logger.
package agent
