package submit

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tide-project/tide/internal/capacity"
)

func TestCheckDefaults(t *testing.T) {
	s, err := Parse([]byte(`{"command":"  echo hi\n"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Spec{Command: "echo hi", Resources: capacity.Resources{MilliCPU: 1000, Memory: 512 << 20},
		Replicas: 1, RestartPolicy: RestartNever, Exclusive: true}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("spec = %+v\nwant %+v", s, want)
	}
	s, err = Parse([]byte(`{"command":"x","restart_policy":"on-failure","exclusive":false,"gpu_indices":[1,0],"target_worker":"w"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxRestarts != DefaultMaxRestarts || s.Exclusive || s.Resources.GPUs != 2 || s.TargetWorker != "w" {
		t.Fatalf("spec = %+v", s)
	}
}

// refusals are one body per check of Check, with the start of the
// answer's detail. They also seed FuzzSubmitBody, so that its mutations
// start next to every refusal and not only in the JSON decoder.
var refusals = []struct{ body, want string }{
	{`{"command":" "}`, "command must not be empty"},
	{`{"command":"x","resource_requirements":{"memory_mb":-1}}`, "resource_requirements.memory_mb"},
	{`{"command":"x","gpu_indices":[0]}`, "gpu_indices requires target_worker"},
	{`{"command":"x","gpu_indices":[0],"target_worker":""}`, "gpu_indices requires target_worker"},
	{`{"command":"x","gpu_indices":[-1],"target_worker":"w"}`, "gpu_indices must be non-negative, got -1"},
	{`{"command":"x","gpu_indices":[2,2],"target_worker":"w"}`, "gpu_indices must be unique, 2 repeats"},
	{`{"command":"x","labels":{"":"v"}}`, `label key "" must be 1 to 63 characters`},
	{`{"command":"x","labels":{"k":"` + strings.Repeat("v", 256) + `"}}`, `label value for "k" exceeds 255 characters`},
	{`{"command":"x","venv":"v"}`, `venv must be an absolute path, got "v"`},
	{`{"command":"x","venv":"/a/../b"}`, `venv must not contain '..', got "/a/../b"`},
	{`{"command":"x","replicas":0}`, "replicas must be between 1 and 1000, got 0"},
	{`{"command":"x","max_wait":"soon"}`, `max_wait must be a duration from 1s to 720h0m0s such as 30m, got "soon"`},
	{`{"command":"x","max_wait":"500ms"}`, `max_wait must be a duration`},
	{`{"command":"x","max_wait":"721h"}`, `max_wait must be a duration`},
	{`{"command":"x","restart_policy":"sometimes"}`, `restart_policy must be never, on-failure or always, got "sometimes"`},
	{`{"command":"x","max_restarts":10001}`, "max_restarts must be between 0 and 10000, got 10001"},
	{`{"command":"x","name":"a/b"}`, `name "a/b" must not contain '/', '?', '#', '%' or surrounding spaces`},
	{`{"command":"x","name":""}`, "name must be 1 to 253 characters"},
	{`{"command":"x","name":"a\u0000b\nc"}`, `name "a\x00b\nc" must be UTF-8 without control characters`},
	{`{"command":"x","labels":{"k":"a\nb"}}`, `label value for "k" must be UTF-8 without control characters`},
	{`{"command":"x","labels":{"k\u007f":"v"}}`, `label key "k\x7f" must be UTF-8 without control characters`},
	{`{"command":"x","pool":"p\r"}`, `pool "p\r" must be UTF-8 without control characters`},
	{`{"command":"x","target_worker":"w\u0085"}`, `target_worker "w\u0085" must be UTF-8 without control characters`},
	{`{"command":"a\u0000b"}`, "command must not contain NUL"},
	{`{"command":"` + strings.Repeat("x", MaxCommandBytes+1) + `"}`, "command must be at most 131072 bytes, got 131073"},
	{`{"command":"x","env":{"A=B":"v"}}`, `env name "A=B" must be non-empty without '=' or NUL`},
	{`{"command":"x","env":{"":"v"}}`, `env name "" must be non-empty without '=' or NUL`},
	{`{"command":"x","env":{"A":"\u0000"}}`, `env value for "A" must not contain NUL`},
	{`{"command":"x","env":{"A":"` + strings.Repeat("v", MaxEnvBytes) + `"}}`, "env: at most 524288 bytes of names and values, got 524289"},
}

// manyBody is a submit body with n labels (or env variables when env).
func manyBody(n int, env bool) string {
	field := "labels"
	if env {
		field = "env"
	}
	var b strings.Builder
	b.WriteString(`{"command":"x","` + field + `":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":"v"`, i)
	}
	b.WriteString("}}")
	return b.String()
}

// TestCheckCounts: the number of labels and env variables is bounded, at
// the bound accepted and one past it refused naming the field.
// TestCheckMaxWait: a max_wait given is kept; none leaves it to the pool.
func TestCheckMaxWait(t *testing.T) {
	for body, want := range map[string]time.Duration{`{"command":"x","max_wait":"30m"}`: 30 * time.Minute,
		`{"command":"x"}`: 0, `{"command":"x","max_wait":"1s"}`: time.Second} {
		s, err := Parse([]byte(body))
		if err != nil {
			t.Errorf("%s: refused: %v", body, err)
		} else if s.MaxWait != want {
			t.Errorf("%s: max_wait %v, want %v", body, s.MaxWait, want)
		}
	}
}

func TestCheckCounts(t *testing.T) {
	for _, c := range []struct {
		n    int
		env  bool
		want string
	}{
		{MaxLabels, false, ""},
		{MaxLabels + 1, false, "labels: at most 64, got 65"},
		{100000, false, "labels: at most 64, got 100000"},
		{MaxEnvVars, true, ""},
		{MaxEnvVars + 1, true, "env: at most 256 variables, got 257"},
	} {
		_, err := Parse([]byte(manyBody(c.n, c.env)))
		var e *Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d (env %v): refused: %v", c.n, c.env, err)
		case c.want != "" && (!errors.As(err, &e) || e.Code != 400 || e.Detail != c.want):
			t.Errorf("%d (env %v): error %v, want 400 %q", c.n, c.env, err, c.want)
		}
	}
}

// TestCheckRefusals pins the first failure's status and text for one
// fault of each kind (the API's answers, unchanged by the move from head).
func TestCheckRefusals(t *testing.T) {
	for _, c := range refusals {
		_, err := Parse([]byte(c.body))
		var e *Error
		if !errors.As(err, &e) || e.Code != 400 || !strings.HasPrefix(e.Detail, c.want) {
			t.Errorf("%s: error %v, want 400 with %q", c.body, err, c.want)
		}
	}
}

func TestDecodeRefusals(t *testing.T) {
	for _, c := range []struct{ body, typ, loc string }{
		{`{`, "json_invalid", "body"},
		{`null`, "json_invalid", "body"},
		{`[]`, "type_error", "body"},
		{`{"command":5}`, "type_error", "body.command"},
		{`{"command":"x","resource_requirements":{"gpu_units":"1"}}`, "type_error", "body.resource_requirements.gpu_units"},
		{`{}`, "missing", "body.command"},
		{`{"command":"x"} {}`, "json_invalid", "body"},
		// A closing bracket after the object is trailing data too (the
		// decoder's More() reports false before '}' and ']').
		{`{"command":"x"}}`, "json_invalid", "body"},
		{`{"command":"x"}]`, "json_invalid", "body"},
	} {
		_, err := Parse([]byte(c.body))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Detail) != 1 {
			t.Errorf("%s: error %v, want one 422 item", c.body, err)
			continue
		}
		loc := make([]string, len(ve.Detail[0].Loc))
		for i, l := range ve.Detail[0].Loc {
			loc[i], _ = l.(string)
		}
		if ve.Detail[0].Type != c.typ || strings.Join(loc, ".") != c.loc || !json.Valid(ve.Body) {
			t.Errorf("%s: %+v, want %s at %s with a JSON body", c.body, ve, c.typ, c.loc)
		}
	}
}

// FuzzSubmitBody: Parse (what the API answers a submit body before the
// head looks at its state) never panics; it refuses with a 422 or a 400
// that carry a detail, or returns a Spec that holds every guarantee Spec
// documents, from a body that is one valid JSON value. Re-encoding the
// decoded request parses to the same Spec.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range []string{
		`{"command":"echo"}`, `{"command":"x","replicas":3,"name":"a"}`, `{"command":5}`, `{`, `null`, `[]`,
		`{"command":"x","gpu_indices":[0],"target_worker":"w"}`, `{"command":"x","resource_requirements":{"cpu_cores":1e308}}`,
		`{"command":"x","labels":{"k":"v"},"env":{"PORT":"1"},"venv":"/v"}`, `{"command":"x","restart_policy":"always","max_restarts":-1}`,
		`{"command":"x"}}`, `{"command":" y ","pool":"p","daemon":true,"restartable":true,"exclusive":false}`,
		`{"command":"x","gpu_indices":[1,0],"target_worker":"w","labels":{"a":"b"},"replicas":1000,"max_restarts":10000,"name":"n"}`,
	} {
		f.Add([]byte(s))
	}
	for _, c := range refusals {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, err := Parse(body)
		if err != nil {
			checkRefusal(t, body, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("body %q: accepted but not valid JSON", body)
		}
		checkSpec(t, body, spec)
		req, err := Decode(body)
		if err != nil {
			t.Fatalf("body %q: Parse accepted, Decode refused: %v", body, err)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("body %q: request does not marshal: %v", body, err)
		}
		spec2, err := Parse(again)
		if err != nil {
			t.Fatalf("body %q: re-encoded as %s, refused: %v", body, again, err)
		}
		if a, b := normalized(*spec), normalized(*spec2); !reflect.DeepEqual(a, b) {
			t.Fatalf("body %q: re-encoded as %s, spec changed:\n%+v\n%+v", body, again, a, b)
		}
	})
}

func checkRefusal(t *testing.T, body []byte, err error) {
	t.Helper()
	var ve *ValidationError
	var e *Error
	switch {
	case errors.As(err, &ve):
		if len(ve.Detail) != 1 || ve.Detail[0].Msg == "" || len(ve.Detail[0].Loc) == 0 || ve.Detail[0].Loc[0] != "body" {
			t.Fatalf("body %q: bad 422 detail %+v", body, ve.Detail)
		}
		if !json.Valid(ve.Body) {
			t.Fatalf("body %q: 422 echoes %q, not JSON", body, ve.Body)
		}
		if _, err := json.Marshal(ve); err != nil {
			t.Fatalf("body %q: 422 does not marshal: %v", body, err)
		}
	case errors.As(err, &e):
		if e.Code != 400 || e.Detail == "" {
			t.Fatalf("body %q: refusal %d %q", body, e.Code, e.Detail)
		}
	default:
		t.Fatalf("body %q: error %T %v is neither 422 nor 400", body, err, err)
	}
}

func checkSpec(t *testing.T, body []byte, s *Spec) {
	t.Helper()
	fail := func(what string) { t.Fatalf("body %q: accepted with %s: %+v", body, what, s) }
	if s.Command == "" || strings.TrimSpace(s.Command) != s.Command {
		fail("an empty or untrimmed command")
	}
	if s.Resources.MilliCPU < 0 || s.Resources.GPUs < 0 || s.Resources.Memory < 0 {
		fail("negative resources")
	}
	if len(s.GPUIndices) > 0 {
		if s.TargetWorker == "" || s.Resources.GPUs != int64(len(s.GPUIndices)) {
			fail("gpu_indices without a target or with another GPU count")
		}
		sorted := slices.Sorted(slices.Values(s.GPUIndices))
		if sorted[0] < 0 || len(slices.Compact(sorted)) != len(s.GPUIndices) {
			fail("negative or repeated gpu_indices")
		}
	}
	if len(s.Command) > MaxCommandBytes || strings.IndexByte(s.Command, 0) >= 0 {
		fail("a long command or one with NUL")
	}
	if len(s.Labels) > MaxLabels {
		fail("too many labels")
	}
	for k, v := range s.Labels {
		if k == "" || len(k) > MaxLabelKey || len(v) > MaxLabelValue {
			fail("a label out of bounds")
		}
		if !printableRef(k) || !printableRef(v) {
			fail("a label with a control character or not UTF-8")
		}
	}
	if len(s.Env) > MaxEnvVars {
		fail("too many env variables")
	}
	size := 0
	for k, v := range s.Env {
		size += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			fail("an env variable exec refuses")
		}
	}
	if size > MaxEnvBytes {
		fail("an env past its size")
	}
	if !printableRef(s.Name) || !printableRef(s.Pool) || !printableRef(s.TargetWorker) {
		fail("a name, pool or target with a control character or not UTF-8")
	}
	if s.Venv != "" && (!path.IsAbs(s.Venv) || slices.Contains(strings.Split(s.Venv, "/"), "..")) {
		fail("a relative venv or one with '..'")
	}
	if s.Replicas < 1 || s.Replicas > MaxReplicas {
		fail("replicas out of range")
	}
	if !s.RestartPolicy.Valid() {
		fail("an unknown restart policy")
	}
	if s.MaxRestarts < 0 || s.MaxRestarts > MaxRestartsLimit {
		fail("max_restarts out of range")
	}
	if s.Name != "" && ValidName(s.Name) != nil {
		fail("an invalid name")
	}
}

// printableRef is printable written the slow, obvious way: every rune
// decodes and is none of C0, DEL or C1.
func printableRef(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return false
		}
	}
	return true
}

// normalized maps empty maps and slices to nil: the request's encoding
// omits them, so only their emptiness survives a round trip.
func normalized(s Spec) Spec {
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.GPUIndices) == 0 {
		s.GPUIndices = nil
	}
	return s
}

// FuzzCheck drives Check with typed field values (set picks which fields
// the request has), where FuzzSubmitBody's byte mutations mostly explore
// the JSON decoder: the answer is a 400 with a detail or a Spec that holds
// Spec's guarantees, and the request sent as JSON gets the same answer
// from Parse (when its strings are valid UTF-8, which JSON keeps as is).
func FuzzCheck(f *testing.F) {
	f.Add("echo", 1.0, int64(0), int64(512), "", []byte{}, "k", "v", "/v", 1, "never", 0, "n", "", uint16(0xffff))
	f.Add(" ", 0.5, int64(-1), int64(1<<40), "w", []byte{0, 1, 1}, "", "", "a/../b", 0, "sometimes", -1, "a/b", "p", uint16(0x0fff))
	f.Add("x", -0.0, int64(8), int64(0), "w", []byte{255}, string(make([]byte, 64)), "", "v", 1001, "on-failure", 10001, " n", "", uint16(0x1ff1))
	// Two that pass the early checks and reach late ones: a venv with '..',
	// and a restart policy without max_restarts (the default applies).
	f.Add("x", 2.0, int64(1), int64(1024), "w", []byte{0, 1}, "k", "v", "/a/../b", 2, "always", 3, "n", "p", uint16(0x3fff))
	f.Add("x", 2.0, int64(1), int64(1024), "w", []byte{0, 1}, "k", "v", "/v", 2, "on-failure", 0, "n", "p", uint16(0x3bff))
	for _, c := range refusals { // one seed next to each refusal
		req, err := Decode([]byte(c.body))
		if err != nil {
			f.Fatal(err)
		}
		a := checkArgs(req)
		f.Add(a.command, a.cpu, a.gpus, a.memMB, a.target, a.gpuIdx, a.labelKey, a.labelValue, a.venv, a.replicas,
			a.policy, a.maxRestarts, a.name, a.pool, a.set)
	}
	f.Fuzz(func(t *testing.T, command string, cpu float64, gpus, memMB int64, target string, gpuIdx []byte,
		labelKey, labelValue, venv string, replicas int, policy string, maxRestarts int, name, pool string, set uint16) {
		req := &Request{Command: &command}
		has := func(bit int) bool { return set&(1<<bit) != 0 }
		if has(0) {
			req.ResourceRequirements = &ResourceSpec{}
			if has(1) {
				req.ResourceRequirements.CPUCores = &cpu
			}
			if has(2) {
				req.ResourceRequirements.GPUUnits = &gpus
			}
			if has(3) {
				req.ResourceRequirements.MemoryMB = &memMB
			}
		}
		if has(4) {
			req.TargetWorker = &target
		}
		if has(5) {
			for _, b := range gpuIdx {
				req.GPUIndices = append(req.GPUIndices, int(int8(b)))
			}
		}
		if has(6) {
			req.Labels = map[string]string{labelKey: labelValue}
			req.Env = map[string]string{labelKey: labelValue}
		}
		if has(7) {
			req.Venv = &venv
		}
		if has(8) {
			req.Replicas = &replicas
		}
		if has(9) {
			req.RestartPolicy = &policy
		}
		if has(10) {
			req.MaxRestarts = &maxRestarts
		}
		if has(11) {
			req.Name = &name
		}
		if has(12) {
			req.Pool = &pool
		}
		if has(13) {
			flag := has(14)
			req.Exclusive, req.Daemon, req.Restartable = &flag, &flag, &flag
		}
		spec, err := Check(req)
		body, merr := json.Marshal(req)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != 400 || e.Detail == "" {
				t.Fatalf("request %s: refusal %T %v", body, err, err)
			}
		} else {
			checkSpec(t, body, spec)
		}
		for _, s := range []string{command, target, labelKey, labelValue, venv, policy, name, pool} {
			if !utf8.ValidString(s) {
				return
			}
		}
		if merr != nil {
			return // NaN or an infinity: not JSON
		}
		spec2, err2 := Parse(body)
		switch {
		case (err == nil) != (err2 == nil):
			t.Fatalf("request %s: Check says %v, Parse says %v", body, err, err2)
		case err != nil && err.Error() != err2.Error():
			t.Fatalf("request %s: Check says %v, Parse says %v", body, err, err2)
		case err == nil && !reflect.DeepEqual(normalized(*spec), normalized(*spec2)):
			t.Fatalf("request %s: Check and Parse differ:\n%+v\n%+v", body, spec, spec2)
		}
	})
}

// fuzzCheckArgs are FuzzCheck's arguments.
type fuzzCheckArgs struct {
	command                    string
	cpu                        float64
	gpus, memMB                int64
	target                     string
	gpuIdx                     []byte
	labelKey, labelValue, venv string
	replicas                   int
	policy                     string
	maxRestarts                int
	name, pool                 string
	set                        uint16
}

// checkArgs are FuzzCheck's arguments for req (one label at most, the
// three flags all set or all unset, GPU indices between -128 and 127).
func checkArgs(req *Request) fuzzCheckArgs {
	a := fuzzCheckArgs{command: *req.Command, gpuIdx: []byte{}}
	str := func(p *string, bit int) string {
		if p == nil {
			return ""
		}
		a.set |= 1 << bit
		return *p
	}
	if r := req.ResourceRequirements; r != nil {
		a.set |= 1
		if r.CPUCores != nil {
			a.cpu, a.set = *r.CPUCores, a.set|1<<1
		}
		if r.GPUUnits != nil {
			a.gpus, a.set = *r.GPUUnits, a.set|1<<2
		}
		if r.MemoryMB != nil {
			a.memMB, a.set = *r.MemoryMB, a.set|1<<3
		}
	}
	a.target = str(req.TargetWorker, 4)
	if req.GPUIndices != nil {
		a.set |= 1 << 5
		for _, g := range req.GPUIndices {
			a.gpuIdx = append(a.gpuIdx, byte(int8(g)))
		}
	}
	for k, v := range req.Labels {
		a.labelKey, a.labelValue, a.set = k, v, a.set|1<<6
	}
	a.venv = str(req.Venv, 7)
	if req.Replicas != nil {
		a.replicas, a.set = *req.Replicas, a.set|1<<8
	}
	a.policy = str(req.RestartPolicy, 9)
	if req.MaxRestarts != nil {
		a.maxRestarts, a.set = *req.MaxRestarts, a.set|1<<10
	}
	a.name, a.pool = str(req.Name, 11), str(req.Pool, 12)
	if req.Exclusive != nil {
		a.set |= 1 << 13
		if *req.Exclusive {
			a.set |= 1 << 14
		}
	}
	return a
}
