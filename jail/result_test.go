package jail

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestStatusesListsEveryStatus: a status constant added to result.go but
// not to Statuses would be missing wherever the statuses are enumerated
// (the daemon's metrics).
func TestStatusesListsEveryStatus(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "result.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Status" {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no Status constants found in result.go")
	}
	listed := Statuses()
	if len(listed) != len(declared) {
		t.Errorf("Statuses has %d entries, result.go declares %d statuses (%v)", len(listed), len(declared), declared)
	}
	for _, s := range listed {
		if slices.Contains(listed[slices.Index(listed, s)+1:], s) {
			t.Errorf("Statuses lists %q twice", s)
		}
	}
}
