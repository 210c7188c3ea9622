package trace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestBoundIsPure: bound.go, the offline lower bound, imports no I/O or
// randomness and never reads the clock, like the pure packages
// (STYLE.md §3.15; the archtest list covers whole packages only).
func TestBoundIsPure(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "bound.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, banned := range []string{"os", "io", "net", "log", "database/sql", "syscall", "math/rand", "embed"} {
			if path == banned || strings.HasPrefix(path, banned+"/") {
				t.Errorf("bound.go imports %s", path)
			}
		}
	}
	clock := []string{"Now", "Sleep", "Since", "Until", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && slices.Contains(clock, sel.Sel.Name) {
				t.Errorf("bound.go calls time.%s", sel.Sel.Name)
			}
		}
		return true
	})
}
