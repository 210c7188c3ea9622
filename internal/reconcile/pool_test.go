package reconcile

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		errHas []string
	}{
		{name: "fixed", cfg: Config{Nodes: capacity.Fixed(3)}},
		{name: "elastic with marks", cfg: Config{Nodes: capacity.Elastic(0, 8), ProtectFirstNode: true, ScaleDownDelay: 10 * time.Minute}},
		{name: "empty pool", cfg: Config{}},
		{name: "negative delay", cfg: Config{Nodes: capacity.Fixed(1), ScaleDownDelay: -time.Second},
			errHas: []string{"scale_down_delay: must not be negative, got -1s"}},
		{name: "bad nodes", cfg: Config{Nodes: capacity.NodeSpec{Min: 4, Desired: 4, Max: 2, Elastic: true}},
			errHas: []string{"nodes: min: 4 is above max 2"}},
		{name: "both", cfg: Config{Nodes: capacity.NodeSpec{Min: -1}, ScaleDownDelay: -time.Minute},
			errHas: []string{"nodes: min: must not be negative", "scale_down_delay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := New(tt.cfg)
			if len(tt.errHas) == 0 {
				if err != nil || newErr != nil {
					t.Fatalf("Validate = %v, New = %v; want no error", err, newErr)
				}
				return
			}
			if err == nil || newErr == nil {
				t.Fatalf("Validate = %v, New = %v; want errors", err, newErr)
			}
			for _, want := range tt.errHas {
				if !strings.Contains(err.Error(), want) || !strings.Contains(newErr.Error(), want) {
					t.Errorf("Validate = %q, New = %q; want both to contain %q", err, newErr, want)
				}
			}
		})
	}
}

// TestNewStartsWatching: New emits nothing and starts watching with the
// spec's initial count; the first Tick provisions it.
func TestNewStartsWatching(t *testing.T) {
	tests := []struct {
		spec capacity.NodeSpec
		want []NodeID
	}{
		{capacity.Fixed(3), []NodeID{0, 1, 2}},
		{capacity.NodeSpec{Min: 1, Desired: 2, Max: 4, Elastic: true}, []NodeID{0, 1}},
		{capacity.Elastic(0, 4), nil},
	}
	for _, tt := range tests {
		p, err := New(Config{Nodes: tt.spec})
		if err != nil {
			t.Fatal(err)
		}
		if p.State() != Watching || p.Desired() != tt.spec.Initial() || p.Effective() != 0 {
			t.Fatalf("%s: New = %s, desired %d, effective %d", tt.spec, p.State(), p.Desired(), p.Effective())
		}
		acts := p.Step(base, Tick{})
		var got []NodeID
		if len(acts) == 1 {
			if pr, ok := acts[0].(Provision); ok {
				got = pr.IDs
			}
		}
		if len(acts) > 1 || strconv.Quote(formatIDs(got)) != strconv.Quote(formatIDs(tt.want)) {
			t.Fatalf("%s: first tick = %v, want provision %v", tt.spec, acts, tt.want)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Watching: "watching", ScalingUp: "scaling_up", Draining: "draining", State(7): "State(7)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}

// TestPurity keeps the package pure (STYLE §3 item 15): no I/O imports and no
// reads of the wall clock in non-test files.
func TestPurity(t *testing.T) {
	banned := map[string]bool{"os": true, "net": true, "log": true, "database/sql": true, "os/exec": true, "net/http": true, "log/slog": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		checked++
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if banned[path] {
				t.Errorf("%s imports %q", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Sleep", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick":
					t.Errorf("%s: calls time.%s; time is an argument", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
