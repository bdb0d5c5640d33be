package jail

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// TestStatusesListsEveryStatus: a status constant added to result.go but
// not to Statuses would be missing wherever the statuses are enumerated
// (the daemon's metrics). The constants are the api's, re-exported (or of
// type Status): api's own test holds its list to its declarations.
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
			for _, n := range vs.Names {
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Status" || strings.HasPrefix(n.Name, "Status") {
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
