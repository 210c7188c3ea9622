package trace

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kind is what a trace describes, and so which of the Reader's Next methods
// reads it.
type Kind int

// The kinds of trace.
const (
	// KindJobs is one row per job, task or pod: submit time, duration and a
	// resource request (Reader.NextJob).
	KindJobs Kind = iota + 1
	// KindRate is a series of time bins each counting arrivals (requests,
	// job submissions) in the bin (Reader.NextBin).
	KindRate
	// KindLevel is a series of time bins each giving an amount present
	// during the bin, such as GPUs demanded or nodes busy (Reader.NextBin).
	KindLevel
	// KindNodes is one row per node of a cluster: a node-shape catalogue,
	// not a workload (Reader.NextNode).
	KindNodes
)

// String returns the kind's name: jobs, rate, level or nodes.
func (k Kind) String() string {
	switch k {
	case KindJobs:
		return "jobs"
	case KindRate:
		return "rate"
	case KindLevel:
		return "level"
	case KindNodes:
		return "nodes"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Format is one trace layout: its kind, the header it is recognised by and,
// for series, the columns that carry the value and the source's capacity.
type Format struct {
	// Name identifies the format, e.g. "philly-jobs"; Options.Format takes it.
	Name string
	// Kind is what the rows describe.
	Kind Kind
	// Header is the exact set of columns a file of this format has; Detect
	// recognises the format by it (in any order). Empty for the generic
	// formats, which are recognised by their required columns instead.
	Header []string
	// Value is the column of a rate or level series read into Bin.Value;
	// several columns joined by "+" are summed. Options.Column overrides it.
	Value string
	// Capacity is the column of a level series read into Bin.Capacity, or "".
	Capacity string
	// Width is the bin width of a series; zero means it is inferred from
	// the first two rows (or given by Options.BinWidth).
	Width time.Duration
	// Doc says in one line what the rows are and how the columns map.
	Doc string
}

// The column names the readers understand. Job traces share jobColumns;
// every other column of a job trace becomes a label.
const (
	colJobID       = "job_id"
	colTaskIndex   = "task_index"
	colTaskID      = "task_id"
	colSubmit      = "submit_s"
	colStart       = "start_s"
	colDuration    = "duration_s"
	colGPUs        = "gpus"
	colGPUMilli    = "gpu_milli"
	colCPUs        = "cpus"
	colMemGB       = "mem_gb"
	colCPUNorm     = "cpu_norm"
	colMemNorm     = "mem_norm"
	colPreexisting = "preexisting"
	colAliveAtEnd  = "alive_at_end"
	colTime        = "t_s"
	colRequests    = "requests"
	colNodeID      = "node_id"
)

// replicaColumns are the columns that give a job's replica count, in the
// order they are looked for: the first present is used.
var replicaColumns = []string{"replicas", "instances", "tasks"}

// formats lists the layouts of the traces in shared/traces (see its README)
// and the generic layouts that any file following the README's conventions
// matches. Detect tries the specific ones first.
var formats = []Format{
	{
		Name: "philly-jobs", Kind: KindJobs,
		Header: []string{"job_id", "submit_s", "start_s", "duration_s", "gpus", "cpus", "mem_gb", "vc"},
		Doc:    "Microsoft Philly 2017 DL training jobs (philly_jobs.csv): one replica of gpus GPUs for duration_s from submit_s; no CPU or memory; vc becomes a label",
	},
	{
		Name: "alibaba-gpu2023-pods", Kind: KindJobs,
		Header: []string{"job_id", "submit_s", "start_s", "duration_s", "gpus", "gpu_milli", "cpus", "mem_gb", "qos", "phase", "preexisting", "creation_time", "scheduled_time", "deletion_time"},
		Doc:    "Alibaba GPU cluster 2023 pods (alibaba_gpu2023_pods.csv): one replica of cpus, mem_gb GiB and gpus GPUs (gpu_milli thousandths with Options.GPUShareResource); never-scheduled pods have no duration and are Censored",
	},
	{
		Name: "alibaba-gpu2023-nodes", Kind: KindNodes,
		Header: []string{"node_id", "cpus", "mem_gb", "gpus", "gpu_model"},
		Doc:    "Alibaba GPU cluster 2023 node list (alibaba_gpu2023_nodes.csv): node shapes, cpus, mem_gb GiB, gpus; gpu_model becomes a label",
	},
	{
		Name: "alibaba-dlrm2025-instances", Kind: KindJobs,
		Header: []string{"job_id", "submit_s", "start_s", "duration_s", "gpus", "cpus", "mem_gb", "app", "role", "rdma_pct", "max_per_node", "preexisting", "alive_at_end"},
		Doc:    "Alibaba DLRM inference instances 2025 (alibaba_dlrm2025_instances.csv): one replica each; alive_at_end=1 marks Censored rows whose duration runs to the trace end",
	},
	{
		Name: "google2011-jobs", Kind: KindJobs,
		Header: []string{"job_id", "submit_s", "start_s", "duration_s", "tasks", "gpus", "cpus", "mem_gb", "cpu_norm", "mem_norm", "priority", "sched_class", "end_event", "preexisting"},
		Doc:    "Google Borg 2011 jobs (google2011_jobs.csv): tasks replicas of cpu_norm, mem_norm × Options.NormalizedMachine; blank duration_s is Censored",
	},
	{
		Name: "google2011-tasks", Kind: KindJobs,
		Header: []string{"job_id", "task_index", "submit_s", "start_s", "duration_s", "gpus", "cpus", "mem_gb", "cpu_norm", "mem_norm", "priority", "sched_class", "end_event", "schedule_count"},
		Doc:    "Google Borg 2011 tasks of hours 1-4 (google2011_tasks_1h-4h.csv): one replica of cpu_norm, mem_norm × Options.NormalizedMachine; ID is job_id/task_index",
	},
	{
		Name: "alibaba2017-batch-tasks", Kind: KindJobs,
		Header: []string{"job_id", "task_id", "submit_s", "start_s", "duration_s", "instances", "gpus", "cpus", "mem_gb", "plan_cpu_raw", "mem_norm", "status", "preexisting"},
		Doc:    "Alibaba 2017 batch tasks (alibaba2017_batch_tasks.csv): instances replicas of cpus and mem_norm × Options.NormalizedMachine; duration includes queueing; ID is job_id/task_id",
	},
	{
		Name: "azure-llm2023-rate", Kind: KindRate, Value: "requests", Width: time.Second,
		Header: []string{"t_s", "requests", "context_tokens", "generated_tokens"},
		Doc:    "Azure LLM inference 2023, conversation or code (azure_llm2023_*_rate_1s.csv): requests per 1 s bin (or context_tokens, generated_tokens with Options.Column)",
	},
	{
		Name: "alibaba-genai2026-rate", Kind: KindRate, Value: "requests", Width: time.Minute,
		Header: []string{"t_s", "requests", "exec_seconds", "images"},
		Doc:    "Alibaba Stable-Diffusion serving 2026 (alibaba_genai_v2026_sd_requests_1min.csv): requests per 60 s bin (or exec_seconds, images with Options.Column)",
	},
	{
		Name: "google2011-job-rate", Kind: KindRate, Value: "requests", Width: 5 * time.Minute,
		Header: []string{"t_s", "requests", "jobs_started", "jobs_ended", "jobs_running"},
		Doc:    "Google Borg 2011 job submissions per 300 s bin over 29 days (google2011_job_rate_5min.csv): requests = jobs first submitted in the bin",
	},
	{
		Name: "helios-gpu-demand", Kind: KindLevel, Value: "gpus_demand_max", Capacity: "gpus_capacity", Width: 5 * time.Minute,
		Header: []string{"t_s", "gpus_capacity", "gpus_running", "gpus_pending", "gpus_demand_max", "jobs_running", "jobs_pending"},
		Doc:    "SenseTime Helios Earth GPU demand, May 2020 (helios_earth_gpu_demand_5min.csv): GPUs demanded (max of running+pending over the 300 s bin); capacity = the VC quota",
	},
	{
		Name: "philly-active-nodes", Kind: KindLevel, Value: "nodes_active_max", Capacity: "nodes_total", Width: 5 * time.Minute,
		Header: []string{"t_s", "nodes_active_mean", "nodes_active_max", "nodes_total"},
		Doc:    "Philly busy nodes, Oct-Dec 2017 (philly_active_nodes_5min.csv): nodes busy (max over the 300 s bin); capacity = nodes in the cluster",
	},
	{
		Name: "jobs", Kind: KindJobs,
		Doc: "any job trace with submit_s, duration_s and at least one of gpus, cpus, mem_gb, cpu_norm, mem_norm (shared/traces conventions)",
	},
	{
		Name: "rate", Kind: KindRate, Value: "requests",
		Doc: "any rate series with t_s and requests (or Options.Column): arrivals per bin",
	},
	{
		Name: "level", Kind: KindLevel,
		Doc: "any level series with t_s and the column named by Options.Column: an amount present during each bin",
	},
	{
		Name: "nodes", Kind: KindNodes,
		Doc: "any node list with node_id and at least one of cpus, mem_gb, gpus",
	},
}

// Formats returns every format the package reads, the shared/traces ones
// first, then the generic ones.
func Formats() []Format {
	out := make([]Format, len(formats))
	for i, f := range formats {
		f.Header = slices.Clone(f.Header)
		out[i] = f
	}
	return out
}

// FormatByName returns the format called name.
func FormatByName(name string) (Format, error) {
	for _, f := range formats {
		if f.Name == name {
			f.Header = slices.Clone(f.Header)
			return f, nil
		}
	}
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name
	}
	return Format{}, fmt.Errorf("format %q: %w (want one of %s)", name, ErrUnknownFormat, strings.Join(names, ", "))
}

// Detect returns the format of a file from its header: a shared/traces
// layout when the header has exactly its columns (in any order), otherwise
// the generic layout whose required columns it has — jobs (submit_s and
// duration_s), rate (t_s and requests) or nodes (node_id). A level series
// without a known header cannot be detected: name it with Options.Format.
func Detect(header []string) (Format, error) {
	for _, f := range formats {
		if len(f.Header) > 0 && sameColumns(f.Header, header) {
			return f, nil
		}
	}
	has := func(c string) bool { return slices.Contains(header, c) }
	switch {
	case has(colSubmit) && has(colDuration):
		return FormatByName("jobs")
	case has(colTime) && has(colRequests):
		return FormatByName("rate")
	case has(colNodeID):
		return FormatByName("nodes")
	}
	return Format{}, fmt.Errorf("header %s: %w: want submit_s and duration_s (jobs), t_s and requests (rate) or node_id (nodes)",
		strings.Join(header, ","), ErrUnknownFormat)
}

func sameColumns(want, got []string) bool {
	if len(want) != len(got) {
		return false
	}
	for _, c := range want {
		if !slices.Contains(got, c) {
			return false
		}
	}
	return true
}
