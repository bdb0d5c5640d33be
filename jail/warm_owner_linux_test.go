package jail

import (
	"strings"
	"testing"
)

// TestWarmTemplatesPerOwner: one tenant's runs bring in at most their
// share of the pool's templates, so that a tenant cycling through option
// sets cannot take every free one and leave other tenants' runs cold
// (a review saw 7 of 8 taken by one client varying limits.tmp); the
// daemon's own prewarmed templates count for nobody.
func TestWarmTemplatesPerOwner(t *testing.T) {
	// No core is ever spare: templates are learnt, no runtime is started.
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{MaxTemplates: 4, Spare: func() bool { return false }})
	t.Cleanup(w.Close)
	w.Learn(&WarmJob{Key: "default", Class: "sh", Template: &Job{}})
	offer := func(key, owner string) string {
		t.Helper()
		r, reason := w.take(&WarmJob{Key: key, Class: "sh", Template: &Job{}, Owner: owner})
		if r != nil {
			t.Fatalf("%s of %s: a runtime where none was started", key, owner)
		}
		return reason
	}
	if why := offer("a1", "a"); !strings.HasPrefix(why, "the first run of its profile") {
		t.Fatalf("a's first option set: %q", why)
	}
	if why := offer("a2", "a"); !strings.Contains(why, "1 option sets of a's runs already") {
		t.Errorf("a's second option set: %q, want it refused a template of its own", why)
	}
	if why := offer("b1", "b"); !strings.HasPrefix(why, "the first run of its profile") {
		t.Errorf("b's first option set after a's two: %q", why)
	}
	if why := offer("a1", "a"); why != "no warm runtime was idle" {
		t.Errorf("a's first option set again: %q", why)
	}
	if !w.Knows("default") || w.Knows("a2") {
		t.Errorf("the pool knows default %v, a2 %v", w.Knows("default"), w.Knows("a2"))
	}
}
