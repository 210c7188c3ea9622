package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tide-project/tide"

// purePackages decide without I/O: policies, bin-packing, the reconciler,
// deletion marks and their vocabulary. Time is an argument there.
var purePackages = []string{
	"internal/capacity",
	"internal/policy",
	"internal/binpack",
	"internal/consolidate",
	"internal/reconcile",
	"internal/deletion",
	"internal/lifecycle",
	"internal/decide",
	"internal/strictjson",
	"internal/scheduler",
	"internal/fleet",
	"internal/validate",
	"internal/submit",
	"internal/kube/demand",
	"internal/kube/drain",
	"internal/kube/provreq",
	"internal/routing",
}

// bannedImports are the I/O packages a pure package may not import
// (a prefix bans the subpackages too).
var bannedImports = []string{"os", "net", "database/sql", "log", "syscall", "io/ioutil", "io/fs", "embed"}

// bannedTimeCalls read the wall clock or wait on it.
var bannedTimeCalls = []string{"Now", "Sleep", "Since", "Until", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

// parseDir parses the non-test Go files of one directory.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestPurePackagesDoNoIO holds the rule of DESIGN.md and STYLE.md §3.15:
// decision code imports no I/O package, imports no impure tide package, and
// never reads the clock.
func TestPurePackagesDoNoIO(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	for _, pkg := range purePackages {
		dir := filepath.Join(root, pkg)
		if _, err := os.Stat(dir); err != nil {
			continue // not written yet
		}
		checked++
		for _, f := range parseDir(t, dir) {
			for _, v := range violations(f, pkg) {
				t.Errorf("%s: %s", pkg, v)
			}
		}
	}
	if checked < 4 {
		t.Fatalf("only %d pure packages found; the list is stale", checked)
	}
}

func violations(f *ast.File, pkg string) []string {
	var out []string
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, b := range bannedImports {
			if path == b || strings.HasPrefix(path, b+"/") {
				out = append(out, "imports "+path)
			}
		}
		if rest, ok := strings.CutPrefix(path, module+"/"); ok && !slices.Contains(purePackages, rest) {
			out = append(out, "imports impure package "+path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" {
		return out
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == timeName && slices.Contains(bannedTimeCalls, sel.Sel.Name) {
			out = append(out, "uses time."+sel.Sel.Name+" (time is an argument in pure code)")
		}
		return true
	})
	return out
}

// TestViolationsDetected proves the checker can fail.
func TestViolationsDetected(t *testing.T) {
	src := `package p
import (
	"os"
	clk "time"
	"net/http"
	"github.com/tide-project/tide/internal/cli"
)
var _ = os.Args
var _ = http.StatusOK
var _ = cli.Main
func f() { _ = clk.Now(); clk.Sleep(1) }
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := violations(f, "internal/policy")
	want := []string{"imports os", "imports net/http", "imports impure package " + module + "/internal/cli",
		"uses time.Now (time is an argument in pure code)", "uses time.Sleep (time is an argument in pure code)"}
	if !slices.Equal(got, want) {
		t.Fatalf("violations = %q\nwant %q", got, want)
	}
}

// TestEveryPackageHasAComment holds STYLE.md §3.15: every package says what it is for.
func TestEveryPackageHasAComment(t *testing.T) {
	root := repoRoot(t)
	n := 0
	dirs := map[string]bool{}
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, _ error) error {
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	for dir := range dirs {
		n++
		documented := false
		for _, f := range parseDir(t, dir) {
			if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
				documented = true
			}
		}
		if !documented {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("package %s has no package comment", rel)
		}
	}
	if n < 5 {
		t.Fatalf("found only %d packages", n)
	}
}
