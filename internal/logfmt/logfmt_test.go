package logfmt

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestJSONKeys: one JSON object a line, with time, level, msg, component and
// pool in that order, each once, the innermost component winning.
func TestJSONKeys(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, "info", "json", "head")
	if err != nil {
		t.Fatal(err)
	}
	pool := log.With("pool", "gpu").With("component", "controller")
	pool.Info("scaled up", "from", 1, "to", 3)
	pool.Debug("not shown")
	log.Warn("lease lost")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %d:\n%s", len(lines), b.String())
	}
	wantKeys := [][]string{{"time", "level", "msg", "component", "pool", "from", "to"}, {"time", "level", "msg", "component"}}
	wantVals := []map[string]any{
		{"level": "INFO", "msg": "scaled up", "component": "controller", "pool": "gpu", "from": 1.0, "to": 3.0},
		{"level": "WARN", "msg": "lease lost", "component": "head"},
	}
	for i, line := range lines {
		keys := jsonKeys(t, line)
		if strings.Join(keys, ",") != strings.Join(wantKeys[i], ",") {
			t.Errorf("line %d keys %v, want %v: %s", i, keys, wantKeys[i], line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range wantVals[i] {
			if m[k] != v {
				t.Errorf("line %d %s = %v, want %v", i, k, m[k], v)
			}
		}
	}
}

// jsonKeys lists the top-level keys of a JSON object in order, repeats included.
func jsonKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", line)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestTextFormatAndBadFlags(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, "debug", "text", "worker")
	if err != nil {
		t.Fatal(err)
	}
	log.With("component", "agent").Debug("joined", "head", "http://h:8000")
	got := b.String()
	if !strings.Contains(got, "level=DEBUG msg=joined component=agent head=http://h:8000\n") || strings.Count(got, "component=") != 1 {
		t.Fatalf("text line %q", got)
	}
	for _, c := range []struct{ level, format, want string }{
		{"loud", "text", "--log-level"}, {"info", "yaml", "--log-format"},
	} {
		if _, err := New(&b, c.level, c.format, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q) = %v, want an error naming %s", c.level, c.format, err, c.want)
		}
	}
}

func TestGroupKeepsOuterAttrs(t *testing.T) {
	var b bytes.Buffer
	log, _ := New(&b, "info", "json", "kube")
	log.WithGroup("req").Info("x", "id", 7)
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["component"] != "kube" || m["req"].(map[string]any)["id"] != 7.0 {
		t.Fatalf("got %v", m)
	}
}
