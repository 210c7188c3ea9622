package sim

import "github.com/tide-project/tide/internal/policy"

// Applicable says whether the named policy can serve the workload on the
// pool: "" when it can, else the reason it cannot. The utilization policy
// (seed 001) acts on GPUs alone: on a pool whose offerings have no GPUs,
// or a trace that requests none, it would never scale and its figures
// would mean nothing.
func Applicable(cfg *Config, w *Workload, name string) string {
	if name != policy.Utilization {
		return ""
	}
	gpus := false
	for _, o := range cfg.Pool.Offerings {
		gpus = gpus || o.Resources.GPUs > 0
	}
	if !gpus {
		return "it scales on GPUs alone, and no offering of pool " + quote(cfg.Pool.Name) + " has a GPU"
	}
	for i := range w.Jobs {
		if w.Jobs[i].Requests.GPUs > 0 {
			return ""
		}
	}
	return "it scales on GPUs alone, and no job of the trace requests one"
}

func quote(s string) string { return `"` + s + `"` }
