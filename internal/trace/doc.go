// Package trace reads workload traces (the CSV files of shared/traces and
// any file that follows their conventions) into one workload model, turns
// request-rate and demand series into instances, and computes the offline
// lower bound a policy is judged against.
//
// # Workload model
//
// A trace is one of four kinds (Format.Kind):
//
//   - jobs: Job values — Replicas identical instances, each requesting
//     capacity.Resources, submitted at an offset from the trace origin and
//     running for a Duration; plus Censored, Preexisting and Labels.
//   - rate: Bin values — arrivals (requests) counted per time bin.
//   - level: Bin values — an amount present during each bin (GPUs
//     demanded, nodes busy), with the source's capacity beside it.
//   - nodes: NodeShape values — a node catalogue, not a workload.
//
// Replicas turns a rate or level series into replica Jobs for a given
// per-replica throughput and replica shape, so that every workload replays
// as jobs. LowerBound (bound.go, pure) integrates over time the
// binpack.LowerBound of what runs at each moment.
//
// # Formats and how their columns map
//
// The format is detected from the header (Detect) or named by
// Options.Format. Shared conventions, applied to every job trace:
//
//	submit_s     Job.Submit (seconds, ≥ 0, non-decreasing down the file; required)
//	start_s      Job.Start, HasStart (the source's start; not used in a replay)
//	duration_s   Job.Duration (seconds ≥ 0); blank → Censored with Duration 0
//	gpus         Requests.GPUs (whole; blank → 0)
//	cpus         Requests.MilliCPU = cpus × 1000, rounded up
//	mem_gb       Requests.Memory = mem_gb × 2^30 bytes (GiB), rounded up
//	cpu_norm     when cpus is blank: cpu_norm × Options.NormalizedMachine CPU
//	mem_norm     when mem_gb is blank: mem_norm × Options.NormalizedMachine memory
//	replicas, instances, tasks   Job.Replicas (the first present; blank → 1; ≥ 1)
//	gpu_milli    with Options.GPUShareResource: thousandths of a GPU (see there)
//	preexisting  Job.Preexisting (0/1)
//	alive_at_end Censored when 1 (the duration runs to the trace end)
//	job_id [+ task_index | task_id]   Job.ID "job" or "job/task"
//	anything else                     Job.Labels[column] (non-blank cells)
//
// Per file of shared/traces:
//
//	philly_jobs.csv                 philly-jobs: 1 replica of gpus GPUs (no CPU or memory); vc label.
//	                                16- to 128-GPU jobs exceed an 8-GPU node: use Options.SplitTo.
//	alibaba_gpu2023_pods.csv        alibaba-gpu2023-pods: 1 replica of cpus, mem_gb, gpus; the 897
//	                                never-scheduled pods (blank duration) are Censored (the 34 pods
//	                                deleted at the trace end are not: the file does not flag them);
//	                                qos, phase, raw creation/scheduled/deletion times are labels.
//	alibaba_gpu2023_nodes.csv       alibaba-gpu2023-nodes: NodeShape of cpus, mem_gb, gpus; gpu_model label.
//	alibaba_dlrm2025_instances.csv  alibaba-dlrm2025-instances: 1 replica of cpus, mem_gb, gpus;
//	                                alive_at_end=1 is Censored (duration runs to the trace end).
//	google2011_jobs.csv             google2011-jobs: tasks replicas of cpu_norm, mem_norm scaled by
//	                                Options.NormalizedMachine (no absolute requests are published);
//	                                duration is first schedule → last task end; blank is Censored.
//	google2011_tasks_1h-4h.csv      google2011-tasks: 1 replica per task, as above; ID job/task_index.
//	alibaba2017_batch_tasks.csv     alibaba2017-batch-tasks: instances replicas of cpus (plan_cpu/100)
//	                                and mem_norm × NormalizedMachine memory; the duration includes
//	                                queueing (no start time); 9,017 rows (8,847 Waiting) have no
//	                                plan_cpu or mem_norm and request nothing (Stats.NoRequest).
//	azure_llm2023_*_rate_1s.csv     azure-llm2023-rate: rate, 1 s bins, Value = requests
//	                                (Options.Column: context_tokens or generated_tokens).
//	alibaba_genai_v2026_sd_requests_1min.csv  alibaba-genai2026-rate: rate, 60 s bins, Value = requests
//	                                (or exec_seconds: GPU-seconds of work, or images).
//	google2011_job_rate_5min.csv    google2011-job-rate: rate, 300 s bins, Value = requests (job
//	                                submissions); jobs_running is a level (Format "level", Column).
//	helios_earth_gpu_demand_5min.csv  helios-gpu-demand: level, 300 s bins, Value = gpus_demand_max
//	                                (the bin's maximum running + pending GPUs), Capacity = gpus_capacity.
//	philly_active_nodes_5min.csv    philly-active-nodes: level, 300 s bins, Value = nodes_active_max,
//	                                Capacity = nodes_total. 119 bins (10 h after t_s 1951200) are
//	                                missing, against the README: read it with Options.AllowGaps.
//
// Series: t_s is Bin.Start; consecutive bins are exactly one width apart
// (every bin is present); Value is the value column (several joined by "+"
// are summed), non-negative.
//
// # Bad input
//
// Reading is strict. Every malformed row — bad CSV, a wrong field count, a
// non-numeric, negative, fractional (for counts) or missing value, a time
// out of order, a missing bin — is an *Error naming the file, line and
// column, and wraps one of the Err* causes. Nothing is skipped unless
// Options.SkipBadRows is set; then Stats counts the skipped rows by cause
// and keeps the first few errors as examples. Censored, preexisting and
// request-less jobs are not errors: they are returned, flagged, and counted
// in Stats.
//
// # Memory
//
// A Reader holds one CSV record at a time; Open and the Next methods read a
// file of any size in constant memory. ReadFile loads a whole trace.
package trace
