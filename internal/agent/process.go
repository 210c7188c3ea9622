package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tide-project/tide/internal/atomicfile"
	"github.com/tide-project/tide/internal/httpapi"
)

// wrapperScript runs an instance's command. It is the process group leader
// whose pid and start time are recorded. It ignores nothing (ignored signals
// would be inherited) but traps TERM, INT and HUP, so when the group is
// stopped it outlives the command and writes the exit code to a file: a
// worker restarted meanwhile learns how an adopted process ended. $1 is the
// shell, $2 the command, $3 the exit file. The command's output goes to fd 3
// (the output FIFO); the wrapper's own (such as the shell's "Terminated"
// notice) goes nowhere, so the instance's log holds only its own output.
const wrapperScript = `trap : TERM INT HUP
"$1" -c "$2" >&3 2>&3 3>&-
ec=$?
printf '%s\n' "$ec" > "$3"
exit "$ec"
`

// runRecord is a local process's record in the data dir: what a restarted
// worker needs to adopt the process, or to report how it ended.
type runRecord struct {
	InstanceID string `json:"instance_id"`
	Attempt    int64  `json:"attempt"`
	// Phase is "starting" (written before the process starts), "running"
	// or "exited".
	Phase      string `json:"phase"`
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"start_ticks,omitempty"`
	// Boot is the kernel boot id when the process started.
	Boot       string `json:"boot,omitempty"`
	Port       int    `json:"port,omitempty"`
	GPUIndices []int  `json:"gpu_indices,omitempty"`
	// Stopped says the worker sent SIGTERM or SIGKILL.
	Stopped     bool `json:"stopped,omitempty"`
	ExitCode    *int `json:"exit_code,omitempty"`
	StartFailed bool `json:"start_failed,omitempty"`
	// FailureReason says why a process that never started did not.
	FailureReason string `json:"failure_reason,omitempty"`
	// Fenced is the reason when the fencing lease stopped the process
	// (fence.go); it is reported as the attempt's failure reason.
	Fenced string `json:"fenced,omitempty"`
}

const (
	recordStarting = "starting"
	recordRunning  = "running"
	recordExited   = "exited"
)

// runDir returns the directory of one process's record, FIFO and exit file.
func (a *Agent) runDir(k key) string {
	return filepath.Join(a.cfg.DataDir, "run", k.ID+"."+strconv.FormatInt(k.Attempt, 10))
}

func (a *Agent) writeRecord(k key, r *runRecord) error {
	if err := atomicfile.WriteFile(filepath.Join(a.runDir(k), "record.json"), mustJSON(r)); err != nil {
		return fmt.Errorf("write run record %s@%d: %w", k.ID, k.Attempt, err)
	}
	return nil
}

// proc is one local process, owned by the agent's loop goroutine.
type proc struct {
	key     key
	phase   phase
	port    int
	rec     runRecord
	adopted bool
	outcome outcome
	// stopTimer is closed to cancel a pending SIGKILL timer.
	stopTimer chan struct{}
	// quit stops the watcher of an adopted process on shutdown.
	quit chan struct{}
	// reader is the read end of the output FIFO; closing it ends copying.
	reader *os.File
	// copied is closed when output copying has ended.
	copied chan struct{}
}

// exitEvent reports that a process and its output have ended.
type exitEvent struct {
	key  key
	code int
}

// killEvent reports that a stopping process's grace period is over.
type killEvent struct{ key key }

// instanceEnv builds the environment of an instance: the worker's (without
// its secrets), the user's env, then tide's overrides: PORT, and
// CUDA_VISIBLE_DEVICES set to the allocated GPUs or cleared, so an instance
// without GPUs never inherits the worker's (PyLet leaves it set, A4).
func (a *Agent) instanceEnv(d httpapi.DesiredInstance, port int) []string {
	env := map[string]string{}
	order := []string{}
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "TIDE_TOKEN", "TIDE_JOIN_TOKEN":
			continue
		}
		set(k, v)
	}
	for k, v := range d.Env {
		set(k, v)
	}
	gpus := make([]string, len(d.GPUIndices))
	for i, g := range d.GPUIndices {
		gpus[i] = strconv.Itoa(g)
	}
	set("PORT", strconv.Itoa(port))
	set("CUDA_VISIBLE_DEVICES", strings.Join(gpus, ","))
	set("TIDE_INSTANCE_ID", d.InstanceID)
	set("TIDE_ATTEMPT", strconv.FormatInt(d.Attempt, 10))
	set("TIDE_WORKER", a.workerID)
	set(runMarkerVar, a.runMarker(key{d.InstanceID, d.Attempt}))
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}

// runMarkerVar marks a process's environment with its worker and key, so a
// process started just before a crash, before its pid was recorded, can be
// found again.
const runMarkerVar = "TIDE_RUN"

func (a *Agent) runMarker(k key) string {
	return a.id.UID + "/" + k.ID + "/" + strconv.FormatInt(k.Attempt, 10)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// userCommand is the command line the inner shell runs (PyLet activates the
// venv first).
func userCommand(d httpapi.DesiredInstance) string {
	if d.Venv != nil && *d.Venv != "" {
		return ". " + shellQuote(filepath.Join(*d.Venv, "bin", "activate")) + " && " + d.Command
	}
	return d.Command
}

// start starts a desired instance. It never fails: a process that cannot be
// started is recorded as exited with StartFailed and reported FAILED.
func (a *Agent) start(d httpapi.DesiredInstance) *proc {
	k := key{d.InstanceID, d.Attempt}
	p := &proc{key: k, rec: runRecord{InstanceID: k.ID, Attempt: k.Attempt, Boot: a.boot, GPUIndices: d.GPUIndices}}
	fail := func(err error) *proc {
		a.log.Error("instance failed to start", "instance", k.ID, "attempt", k.Attempt, "err", err)
		if p.port > 0 {
			a.ports.release(p.port)
			p.port = 0
		}
		p.phase = phaseExited
		p.outcome = outcome{Code: -1, StartFailed: true, Reason: err.Error()}
		code := -1
		p.rec.Phase, p.rec.ExitCode, p.rec.StartFailed, p.rec.Port = recordExited, &code, true, 0
		p.rec.FailureReason = p.outcome.Reason
		if validInstanceID.MatchString(k.ID) {
			if err := os.MkdirAll(a.runDir(k), 0o700); err == nil {
				if err := a.writeRecord(k, &p.rec); err != nil {
					a.log.Warn("cannot record failed start", "err", err)
				}
			}
		}
		return p
	}
	if !validInstanceID.MatchString(k.ID) {
		return fail(fmt.Errorf("instance id %q is not a valid file name", k.ID))
	}
	if strings.TrimSpace(d.Command) == "" {
		return fail(errors.New("empty command"))
	}
	if d.Venv != nil && *d.Venv != "" {
		// PyLet sources bin/activate in the shell, which fails with no
		// reason the head can show; say what is missing and where.
		if _, err := os.Stat(filepath.Join(*d.Venv, "bin", "activate")); err != nil {
			if _, derr := os.Stat(*d.Venv); derr != nil {
				return fail(fmt.Errorf("venv %s not found on worker %s", *d.Venv, a.workerID))
			}
			return fail(fmt.Errorf("venv %s on worker %s has no bin/activate", *d.Venv, a.workerID))
		}
	}
	p.port = a.ports.allocate()
	if p.port == 0 {
		return fail(fmt.Errorf("no free port in %d-%d", a.cfg.PortMin, a.cfg.PortMax))
	}
	p.rec.Port = p.port
	dir := a.runDir(k)
	if err := os.RemoveAll(dir); err != nil {
		return fail(fmt.Errorf("clear run dir: %w", err))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(fmt.Errorf("create run dir: %w", err))
	}
	p.rec.Phase = recordStarting
	if err := a.writeRecord(k, &p.rec); err != nil {
		return fail(err)
	}
	fifo := filepath.Join(dir, "out.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return fail(fmt.Errorf("create output fifo: %w", err))
	}
	// The reader is non-blocking so it does not wait for a writer and Go's
	// poller serves it; it sees EOF once every writer is gone.
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail(fmt.Errorf("open output fifo: %w", err))
	}
	// The process gets the FIFO read-write: it then always has a reader,
	// so its writes never fail with EPIPE while the worker is down; they
	// block once the pipe is full, and a restarted worker drains them.
	wfd, err := syscall.Open(fifo, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		reader.Close()
		return fail(fmt.Errorf("open output fifo for the process: %w", err))
	}
	writer := os.NewFile(uintptr(wfd), fifo)
	cmd := &exec.Cmd{
		Path:        a.cfg.Shell,
		Args:        []string{a.cfg.Shell, "-c", wrapperScript, "tide", a.cfg.Shell, userCommand(d), filepath.Join(dir, "exit")},
		Env:         a.instanceEnv(d, p.port),
		ExtraFiles:  []*os.File{writer},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	writer.Close()
	if err != nil {
		reader.Close()
		return fail(fmt.Errorf("exec %s: %w", a.cfg.Shell, err))
	}
	pid := cmd.Process.Pid
	ticks, err := processStartTicks(pid)
	if err != nil {
		a.log.Warn("cannot read process start time", "pid", pid, "err", err)
	}
	p.rec.Phase, p.rec.PID, p.rec.StartTicks = recordRunning, pid, ticks
	if err := a.writeRecord(k, &p.rec); err != nil {
		a.log.Error("cannot record started process", "instance", k.ID, "err", err)
	}
	p.phase = phaseRunning
	a.attachOutput(p, reader)
	go a.watchChild(p, cmd)
	a.log.Info("instance started", "instance", k.ID, "attempt", k.Attempt, "pid", pid, "port", p.port,
		"gpus", d.GPUIndices)
	return p
}

// attachOutput copies the process's output FIFO into the instance's log.
func (a *Agent) attachOutput(p *proc, reader *os.File) {
	p.reader = reader
	p.copied = make(chan struct{})
	l, err := a.logs.acquire(p.key.ID)
	if err != nil {
		a.log.Error("cannot open instance log; output is lost until it can be", "instance", p.key.ID, "err", err)
	}
	go func() {
		defer close(p.copied)
		defer func() {
			if l != nil {
				a.logs.release(p.key.ID, l)
			}
		}()
		// A failed write (a full disk, a deleted log) loses that output
		// only: the next chunk tries again, and once one is written the
		// log says how much was lost and why.
		var lost int64
		var why error
		buf := make([]byte, 64<<10)
		for {
			n, err := reader.Read(buf)
			if n > 0 {
				var werr error
				if l == nil {
					l, werr = a.logs.acquire(p.key.ID)
				}
				if lost > 0 && l != nil {
					if _, werr = fmt.Fprintf(l, "\n[tide worker %s: %d bytes of output lost: %v]\n", a.workerID, lost, why); werr == nil {
						a.log.Info("instance log writable again", "instance", p.key.ID, "lost_bytes", lost)
						lost = 0
					}
				}
				m := 0
				if werr == nil {
					m, werr = l.Write(buf[:n])
				}
				if werr != nil {
					if lost == 0 {
						a.log.Error("write instance log; output is lost until a write succeeds", "instance", p.key.ID, "err", werr)
						why = werr
					}
					lost += int64(n - m)
				}
			}
			if err != nil {
				return // EOF: every writer is gone; or the reader was closed
			}
		}
	}()
}

// exitCode returns Python's returncode for a finished process: the exit
// status, or -N when killed by signal N.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return ps.ExitCode()
}

// watchChild waits for a child process, then finishes it.
func (a *Agent) watchChild(p *proc, cmd *exec.Cmd) {
	code := -1
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			a.log.Warn("wait for process", "instance", p.key.ID, "err", err)
		}
	}
	if cmd.ProcessState != nil {
		code = exitCode(cmd.ProcessState)
	}
	a.finish(p, code)
}

// watchAdopted polls an adopted process (not a child of this worker) until
// it exits, then reads the exit code its wrapper wrote.
func (a *Agent) watchAdopted(p *proc) {
	t := a.clk.NewTicker(a.cfg.AdoptPollInterval)
	defer t.Stop()
	for processAlive(p.rec.PID, p.rec.StartTicks) {
		select {
		case <-t.C():
		case <-p.quit:
			return
		}
	}
	a.finish(p, a.readExitFile(p.key))
}

// readExitFile returns the code the wrapper wrote, or -9 when there is none
// (the wrapper was killed).
func (a *Agent) readExitFile(k key) int {
	b, err := os.ReadFile(filepath.Join(a.runDir(k), "exit"))
	if err != nil {
		return -int(syscall.SIGKILL)
	}
	c, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -int(syscall.SIGKILL)
	}
	return c
}

// finish runs once a process's main process has exited: it kills what is
// left of its process group, waits (bounded) for the last of its output,
// then hands the exit to the loop.
func (a *Agent) finish(p *proc, code int) {
	if err := syscall.Kill(-p.rec.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		a.log.Warn("kill leftover processes", "instance", p.key.ID, "err", err)
	}
	if p.copied != nil {
		t := a.clk.NewTimer(a.cfg.LogDrainTimeout)
		select {
		case <-p.copied:
		case <-t.C():
			a.log.Warn("output still open after exit; closing it", "instance", p.key.ID)
			p.reader.Close()
			<-p.copied
		case <-a.quit:
		}
		t.Stop()
	}
	select {
	case a.events <- exitEvent{key: p.key, code: code}:
	case <-a.quit:
	}
}

// signalGroup sends sig to a process's group, after checking that the
// recorded leader is still the same process (a reused pid is left alone).
func (a *Agent) signalGroup(p *proc, sig syscall.Signal) {
	if p.adopted && !processAlive(p.rec.PID, p.rec.StartTicks) {
		return
	}
	if err := syscall.Kill(-p.rec.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		a.log.Warn("signal process group", "instance", p.key.ID, "signal", sig.String(), "err", err)
	}
}

// recover reads the run records left by a previous start of this worker:
// a process still alive (same pid and start time, same boot) is adopted; one
// that ended is kept as exited with the code its wrapper wrote, to be
// reported; a record of a process that never started is removed.
func (a *Agent) recover() error {
	root := filepath.Join(a.cfg.DataDir, "run")
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recover processes: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "record.json"))
		if err != nil {
			a.log.Warn("run dir without record; removing it", "dir", dir, "err", err)
			os.RemoveAll(dir)
			continue
		}
		var rec runRecord
		if err := json.Unmarshal(data, &rec); err != nil || !validInstanceID.MatchString(rec.InstanceID) {
			a.log.Warn("unreadable run record; removing it", "dir", dir, "err", err)
			os.RemoveAll(dir)
			continue
		}
		k := key{rec.InstanceID, rec.Attempt}
		if a.runDir(k) != dir {
			a.log.Warn("run record does not match its directory; removing it", "dir", dir)
			os.RemoveAll(dir)
			continue
		}
		if p := a.recoverOne(k, rec); p != nil {
			a.procs[k] = p
		}
	}
	return nil
}

func (a *Agent) recoverOne(k key, rec runRecord) *proc {
	p := &proc{key: k, rec: rec, port: rec.Port}
	sameBoot := rec.Boot == "" || rec.Boot == a.boot
	if rec.Phase == recordStarting && sameBoot {
		// Crashed between starting the process and recording its pid.
		pid, err := findProcessByEnv(runMarkerVar + "=" + a.runMarker(k))
		if err != nil {
			a.log.Warn("scan for a process started before a crash", "instance", k.ID, "err", err)
		}
		if pid > 0 {
			rec.PID = pid
			rec.StartTicks, _ = processStartTicks(pid)
			rec.Phase = recordRunning
			p.rec = rec
		} else if _, err := os.Stat(filepath.Join(a.runDir(k), "exit")); err != nil {
			a.log.Info("dropping record of a process that never started", "instance", k.ID, "attempt", k.Attempt)
			os.RemoveAll(a.runDir(k))
			return nil
		} else {
			rec.Phase = recordRunning // it ran and ended; report its exit code
			p.rec = rec
		}
	}
	switch {
	case rec.Phase == recordExited:
		p.phase = phaseExited
		code := -1
		if rec.ExitCode != nil {
			code = *rec.ExitCode
		}
		p.outcome = outcome{Code: code, Stopped: rec.Stopped, StartFailed: rec.StartFailed, Reason: rec.FailureReason,
			Fenced: rec.Fenced}
		p.port = 0
		return p
	case rec.PID > 0 && sameBoot && processAlive(rec.PID, rec.StartTicks):
		p.adopted = true
		p.phase = phaseRunning
		if rec.Stopped {
			p.phase = phaseStopping
		}
		if p.port > 0 && !a.ports.hold(p.port) {
			a.log.Warn("the port of an adopted instance is reserved by another worker on this host",
				"instance", k.ID, "port", p.port)
		}
		reader, err := os.OpenFile(filepath.Join(a.runDir(k), "out.fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			a.log.Warn("cannot reopen the output of an adopted process", "instance", k.ID, "err", err)
		} else {
			a.attachOutput(p, reader)
		}
		a.log.Info("adopted running instance", "instance", k.ID, "attempt", k.Attempt, "pid", rec.PID)
		return p
	default:
		code := -int(syscall.SIGKILL)
		if sameBoot {
			code = a.readExitFile(k)
		}
		p.phase = phaseExited
		p.outcome = outcome{Code: code, Stopped: rec.Stopped, Fenced: rec.Fenced}
		p.port = 0
		p.rec.Phase, p.rec.ExitCode, p.rec.Port = recordExited, &code, 0
		if err := a.writeRecord(k, &p.rec); err != nil {
			a.log.Warn("record exit of a process that ended while the worker was down", "err", err)
		}
		a.log.Info("instance ended while the worker was down", "instance", k.ID, "attempt", k.Attempt, "exit_code", code)
		return p
	}
}
