// Package jobfile parses TOML job files: PyLet's `submit -c job.toml`,
// every field applied, plus tide's extensions. It is a leaf package so that
// its fuzz test links (and instruments) only what parsing needs.
package jobfile

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// File is a parsed TOML job file (PyLet's `submit -c job.toml`, every
// field applied, plus tide's extensions). Nil fields were not in the file.
//
//	command = "python train.py"        # or ["python", "train.py"] (shell-quoted and joined)
//	name = "train"
//	venv = "/opt/venv"
//	replicas = 2                       # tide
//	restart_policy = "on-failure"      # tide: never | on-failure | always
//	max_restarts = 3                   # tide
//	pool = "gpu"                       # tide
//	daemon = false                     # tide
//	restartable = false                # tide: consolidation may move it (losing its attempt's work)
//	max_wait = "30m"                   # tide: FAILED if not placed within 30m (default: the pool's)
//	priority = 10                      # tide: higher is placed, bought for and kept first
//	gang = true                        # tide: the replicas start together or not at all, or:
//	[gang]                             #   name = "train", size = 4 (= replicas), max_wait = "30m"
//	[resources]
//	cpus = 4                           # cores: 4, 0.5 or "500m"
//	gpus = 1                           # or gpu_indices, not both
//	memory = "8Gi"                     # Gi/G, Mi/M, Ki/K, Ti/T; a bare number is MB
//	gpu_indices = [0, 1]
//	exclusive = true
//	target_worker = "gpu-1"
//	[env]
//	HF_HOME = "${HOME}/hf"             # ${VAR} and $VAR are expanded; unknown ones kept
//	[labels]
//	team = "nlp"
type File struct {
	Command       *string
	Name          *string
	Venv          *string
	Replicas      *int
	RestartPolicy *string
	MaxRestarts   *int
	Pool          *string
	Daemon        *bool
	Restartable   *bool
	// MaxWait is the instances' own max_wait (tide), as written.
	MaxWait *string
	// Priority is the instances' priority (tide).
	Priority *int
	// Gang makes the replicas a gang (tide): set by `gang = true` (empty
	// fields) or a [gang] table.
	Gang         *Gang
	CPUCores     *float64
	GPUs         *int64
	MemoryMB     *int64
	GPUIndices   []int
	Exclusive    *bool
	TargetWorker *string
	Env          map[string]string
	Labels       map[string]string
}

var (
	topKeys      = []string{"command", "name", "venv", "replicas", "restart_policy", "max_restarts", "pool", "daemon", "restartable", "max_wait", "priority", "gang", "resources", "env", "labels"}
	gangKeys     = []string{"name", "size", "max_wait"}
	resourceKeys = []string{"cpus", "gpus", "memory", "gpu_indices", "exclusive", "target_worker"}
)

// Parse parses a TOML job file. lookup resolves ${VAR} and $VAR in
// string values (os.LookupEnv in the CLI); variables it does not know are
// left as written. Errors name the field; unknown keys are errors.
func Parse(data []byte, lookup func(string) (string, bool)) (*File, error) {
	if err := validate.Empty(data); err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
		}
		return nil, err
	}
	p := jobParser{lookup: lookup}
	job := &File{}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		var err error
		switch k {
		case "command":
			job.Command, err = p.command(v)
		case "name":
			job.Name, err = p.str(k, v)
		case "venv":
			job.Venv, err = p.str(k, v)
		case "replicas":
			job.Replicas, err = p.smallInt(k, v, 1, 1000)
		case "restart_policy":
			job.RestartPolicy, err = p.str(k, v)
			if err == nil && !slices.Contains([]string{"never", "on-failure", "always"}, *job.RestartPolicy) {
				err = fmt.Errorf("restart_policy: want never, on-failure or always, got %q", *job.RestartPolicy)
			}
		case "max_restarts":
			job.MaxRestarts, err = p.smallInt(k, v, 0, 10000)
		case "pool":
			job.Pool, err = p.str(k, v)
		case "daemon":
			job.Daemon, err = p.boolean(k, v)
		case "restartable":
			job.Restartable, err = p.boolean(k, v)
		case "max_wait":
			job.MaxWait, err = p.str(k, v)
			if err == nil {
				if d, perr := time.ParseDuration(*job.MaxWait); perr != nil || d < time.Second {
					err = fmt.Errorf("max_wait: want a duration of 1s or more such as 30m, got %q", *job.MaxWait)
				}
			}
		case "priority":
			job.Priority, err = p.smallInt(k, v, -1_000_000_000, 1_000_000_000)
		case "gang":
			job.Gang, err = p.gang(v)
		case "env":
			job.Env, err = p.strMap(k, v)
		case "labels":
			job.Labels, err = p.strMap(k, v)
		case "resources":
			err = p.resources(job, v)
		default:
			err = fmt.Errorf("unknown key %q (known: %s)", k, strings.Join(topKeys, ", "))
		}
		if err != nil {
			return nil, err
		}
	}
	if job.GPUs != nil && job.GPUIndices != nil {
		return nil, errors.New("resources: gpus and gpu_indices are mutually exclusive")
	}
	return job, nil
}

type jobParser struct {
	lookup func(string) (string, bool)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand replaces ${VAR} and $VAR by their values; unknown ones stay.
func (p jobParser) expand(s string) string {
	if p.lookup == nil {
		return s
	}
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := p.lookup(name); ok {
			return v
		}
		return m
	})
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

func (p jobParser) str(field string, v any) (*string, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%s: want a string, got %s", field, typeName(v))
	}
	s = p.expand(s)
	return &s, nil
}

func (p jobParser) boolean(field string, v any) (*bool, error) {
	b, ok := v.(bool)
	if !ok {
		return nil, fmt.Errorf("%s: want true or false, got %s", field, typeName(v))
	}
	return &b, nil
}

func (p jobParser) smallInt(field string, v any, lo, hi int64) (*int, error) {
	n, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("%s: want an integer, got %s", field, typeName(v))
	}
	if n < lo || n > hi {
		return nil, fmt.Errorf("%s: must be between %d and %d, got %d", field, lo, hi, n)
	}
	i := int(n)
	return &i, nil
}

// command accepts a string (trimmed) or an array of strings, which is
// shell-quoted and joined (PyLet's shlex.join).
func (p jobParser) command(v any) (*string, error) {
	var out string
	switch c := v.(type) {
	case string:
		out = strings.TrimSpace(p.expand(c))
	case []any:
		parts := make([]string, len(c))
		for i, e := range c {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("command[%d]: want a string, got %s", i, typeName(e))
			}
			parts[i] = p.expand(s)
		}
		out = ShellJoin(parts)
	default:
		return nil, fmt.Errorf("command: want a string or an array of strings, got %s", typeName(v))
	}
	if out == "" {
		return nil, errors.New("command: must not be empty")
	}
	return &out, nil
}

func (p jobParser) strMap(field string, v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a table, got %s", field, typeName(v))
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s, ok := m[k].(string)
		if !ok {
			return nil, fmt.Errorf("%s.%s: want a string, got %s", field, k, typeName(m[k]))
		}
		out[k] = p.expand(s)
	}
	return out, nil
}

func (p jobParser) resources(job *File, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("resources: want a table, got %s", typeName(v))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		field := "resources." + k
		var err error
		switch k {
		case "cpus":
			job.CPUCores, err = parseCores(field, v)
		case "gpus":
			n, ok := v.(int64)
			if !ok {
				return fmt.Errorf("%s: want a non-negative integer, got %v", field, v)
			}
			if err := validate.GPUs(field, n); err != nil {
				return err
			}
			job.GPUs = &n
		case "memory":
			job.MemoryMB, err = parseMemoryMB(field, v)
		case "gpu_indices":
			arr, ok := v.([]any)
			if !ok {
				return fmt.Errorf("%s: want an array of integers, got %s", field, typeName(v))
			}
			job.GPUIndices = make([]int, 0, len(arr))
			for i, e := range arr {
				n, ok := e.(int64)
				if !ok || n < 0 || n > 1<<20 {
					return fmt.Errorf("%s[%d]: want a non-negative integer, got %v", field, i, e)
				}
				if slices.Contains(job.GPUIndices, int(n)) {
					return fmt.Errorf("%s: index %d repeats", field, n)
				}
				job.GPUIndices = append(job.GPUIndices, int(n))
			}
		case "exclusive":
			job.Exclusive, err = p.boolean(field, v)
		case "target_worker":
			job.TargetWorker, err = p.str(field, v)
		default:
			err = fmt.Errorf("unknown key %q (known: %s)", field, strings.Join(resourceKeys, ", "))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseCores accepts cores as an integer, a number or a CPU quantity
// ("500m", "2").
func parseCores(field string, v any) (*float64, error) {
	var c float64
	switch x := v.(type) {
	case int64:
		c = float64(x)
	case float64:
		c = x
	case string:
		milli, err := capacity.ParseCPU(x)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		c = float64(milli) / 1000
	default:
		return nil, fmt.Errorf("%s: want a number of cores, got %s", field, typeName(v))
	}
	if err := validate.Cores(field, c); err != nil {
		return nil, err
	}
	return &c, nil
}

var memUnits = []struct {
	suffix string
	mb     float64
}{{"Ti", 1 << 20}, {"T", 1 << 20}, {"Gi", 1 << 10}, {"G", 1 << 10}, {"Mi", 1}, {"M", 1}, {"Ki", 1.0 / 1024}, {"K", 1.0 / 1024}}

// parseMemoryMB reads PyLet's memory: a bare number is MB; Ti/T, Gi/G,
// Mi/M, Ki/K are binary units. The result is rounded up to whole MB.
func parseMemoryMB(field string, v any) (*int64, error) {
	var mb float64
	switch x := v.(type) {
	case int64:
		mb = float64(x)
	case float64:
		mb = x
	case string:
		s := strings.TrimSpace(x)
		mult := 1.0
		for _, u := range memUnits {
			if rest, ok := strings.CutSuffix(s, u.suffix); ok {
				s, mult = strings.TrimSpace(rest), u.mb
				break
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a memory size like 512, \"4Gi\" or \"512Mi\"", field, x)
		}
		mb = f * mult
	default:
		return nil, fmt.Errorf("%s: want a size like 512 (MB) or \"4Gi\", got %s", field, typeName(v))
	}
	if err := validate.MemoryMB(field, mb); err != nil {
		return nil, err
	}
	n := int64(math.Ceil(mb))
	return &n, nil
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin quotes each argument for a POSIX shell and joins them (Python's
// shlex.join).
func ShellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if shellSafe.MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'"'"'`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// Gang is a job file's gang: empty fields are left to the defaults (the
// job's name, its replicas, no max wait).
type Gang struct {
	Name    string
	Size    int
	MaxWait string
}

// gang accepts true, false (no gang) or a table of gangKeys.
func (p jobParser) gang(v any) (*Gang, error) {
	switch g := v.(type) {
	case bool:
		if !g {
			return nil, nil
		}
		return &Gang{}, nil
	case map[string]any:
		out := &Gang{}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			switch k {
			case "name", "max_wait":
				s, err := p.str("gang."+k, g[k])
				if err != nil {
					return nil, err
				}
				if k == "name" {
					out.Name = *s
				} else {
					out.MaxWait = *s
				}
			case "size":
				n, err := p.smallInt("gang.size", g[k], 1, 1000)
				if err != nil {
					return nil, err
				}
				out.Size = *n
			default:
				return nil, fmt.Errorf("gang: unknown key %q (known: %s)", k, strings.Join(gangKeys, ", "))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("gang: want true or a table, got %s", typeName(v))
}
