package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A layer rule: packages under one of From may not import a package under
// one of Banned (paths relative to the module; a path covers its subfolders).
type layerRule struct {
	From   []string
	Banned []string
	Why    string
}

// layerRules state how tide's imports point down the layers (DESIGN.md,
// "Where the third wave's parts live"). Pure cores have their own, stricter
// test (TestPurePackagesDoNoIO).
var layerRules = []layerRule{
	{
		From: []string{"internal/provider", "sdk"},
		Banned: []string{"internal/head", "internal/httpapi", "internal/controller", "internal/autoscale",
			"internal/assembly", "internal/up", "internal/kube", "internal/fleet", "internal/store", "internal/etcdstore",
			"internal/agent", "internal/webui"},
		Why: "a provider is a source of machines: it knows nothing of the head, the pool controller, Kubernetes mode or the fleet",
	},
	{
		From:   []string{"sdk"},
		Banned: []string{"internal/provider", "internal/client", "internal/config", "internal/cli"},
		Why:    "the public SDK carries the contract alone: plugin authors must not link tide's own providers or configuration",
	},
	{
		From:   []string{"internal", "sdk", "api", "examples"},
		Banned: []string{"internal/cli"},
		Why:    "the CLI is the top of the tree: only cmd/tide imports it",
	},
	{
		From:   []string{"internal/controller", "internal/autoscale", "internal/reconcile", "internal/policy"},
		Banned: []string{"internal/head", "internal/httpapi", "internal/kube", "internal/assembly"},
		Why:    "a pool's policy, reconciler and controller do not learn where pressure comes from (a head or Kubernetes)",
	},
}

// under reports whether pkg is path or one of its subfolders.
func under(pkg, path string) bool { return pkg == path || strings.HasPrefix(pkg, path+"/") }

// layerViolations lists the imports of pkg (module-relative) that a rule bans.
func layerViolations(pkg string, imports []string) []string {
	var out []string
	for _, imp := range imports {
		rest, ok := strings.CutPrefix(imp, module+"/")
		if !ok {
			continue
		}
		for _, r := range layerRules {
			if !slices.ContainsFunc(r.From, func(f string) bool { return under(pkg, f) }) {
				continue
			}
			if slices.ContainsFunc(r.Banned, func(b string) bool { return under(rest, b) }) {
				out = append(out, pkg+" imports "+rest+": "+r.Why)
			}
		}
	}
	return out
}

// TestLayering walks every package of the module and checks its imports
// (non-test files) against layerRules.
func TestLayering(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		files := parseDir(t, path)
		if len(files) == 0 {
			return nil
		}
		checked++
		var imports []string
		for _, f := range files {
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				imports = append(imports, p)
			}
		}
		for _, v := range layerViolations(filepath.ToSlash(rel), imports) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 30 {
		t.Fatalf("only %d packages found under %s; the walk is broken", checked, root)
	}
}

// TestLayeringDetectsUpwardImports proves the rules can fail: each import
// below runs against the layers and must be reported.
func TestLayeringDetectsUpwardImports(t *testing.T) {
	bad := []struct{ pkg, imp string }{
		{"internal/provider/local", "internal/head"},
		{"internal/provider/aws", "internal/kube/demand"},
		{"internal/provider", "internal/controller"},
		{"sdk/provider", "internal/provider"},
		{"internal/head", "internal/cli"},
		{"internal/controller", "internal/kube/workload"},
	}
	for _, b := range bad {
		if v := layerViolations(b.pkg, []string{module + "/" + b.imp}); len(v) == 0 {
			t.Errorf("%s importing %s was not reported", b.pkg, b.imp)
		}
	}
	good := []struct{ pkg, imp string }{
		{"internal/kube/kwok", "internal/kube/kubeapi"},
		{"internal/provider/local", "internal/provider"},
		{"sdk/provider", "internal/capacity"},
		{"cmd/tide", "internal/cli"},
		{"internal/assembly", "internal/controller"},
	}
	for _, g := range good {
		if v := layerViolations(g.pkg, []string{module + "/" + g.imp}); len(v) != 0 {
			t.Errorf("%s importing %s reported: %v", g.pkg, g.imp, v)
		}
	}
}
