// Package local is the `local` provider: its machines are worker-agent child
// processes of this host (the `tide up` default, DESIGN.md "Real components").
// Each machine has its own directory under a root and the resources of its
// offering; Configure starts its worker process and Drain stops it.
//
// # The machine model, locally
//
//	Create ──► Idle ──Configure──► Configuring ──process started (and Ready)──► Configured
//	  (directory made, no process)        │                                            │
//	                          ◄── Idle ◄── Draining: SIGTERM to the group, SIGKILL ◄───┘ Drain
//	                                        after DrainTimeout
//	any state ──Delete──► Deleting: SIGKILL, data removed, tombstone ──► gone
//	Configuring, Configured ──worker process exits or is killed──► Failed (reason says how)
//
// A local boot is instant, so Create returns with the machine already Idle.
// Configure, Drain and Delete return at once (Configuring, Draining,
// Deleting) and one goroutine per machine, the actuator, carries them out in
// order; Wait blocks until every accepted transition has finished.
//
// # On disk
//
//	<root>/.lock                     flock held by the live Provider: one per root
//	<root>/provider.json             this root's random uid (in every worker's marker)
//	<root>/fences.json               the highest fence per pool
//	<root>/machines/<id>/machine.json the machine's record (pid and start time
//	                                 included), later its tombstone
//	<root>/machines/<id>/data/       the worker's --data-dir
//	<root>/machines/<id>/worker.log  the worker's stdout and stderr
//
// Every record is written atomically (temporary file, fsync, rename) before
// the call that changed it returns, and the fences are written before a new
// epoch is acted on, so a restarted provider keeps refusing deposed
// controllers. Deleted ids keep a tombstone and are never reused.
//
// # Processes
//
// A worker runs in its own process group (so Ctrl-C at the terminal reaches
// only `tide up`, which then calls Shutdown) with the environment variable
// TIDE_LOCAL_MACHINE=<uid>/<machine id>, which the processes it starts
// inherit. Stopping a machine signals the worker's group and then SIGKILLs
// every process still carrying the marker, so a Delete, a Drain or a
// Shutdown leaves no process of the machine behind, even instances that
// moved to their own process group. A process is identified by its pid and
// its start time (/proc/<pid>/stat) under the current boot, so a reused pid
// is never mistaken for a worker.
//
// # Restarts
//
// New on a root another Provider used adopts its machines: a worker whose
// recorded process is still the same process is kept; one whose process is
// gone is reported Failed so the controller replaces it; transitions that were
// in progress are finished (a Configure interrupted before its pid was
// recorded kills any process carrying the machine's marker and starts the
// worker again). Close releases the root and leaves the workers running for
// the next Provider; Shutdown stops every worker (gracefully, then by
// SIGKILL) and leaves the machines Idle, with no process left behind.
//
// The provider needs Linux (/proc and process groups); New fails elsewhere.
package local
