package queue

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsStreamAddAsProvision holds every `nats stream add` of
// docs/queue.md to what the worker checks of the stream Provision makes:
// the one-host path lacked the republish, so a newcomer who followed it
// had a worker that warned and looked at the stream every 250 ms.
func TestDocsStreamAddAsProvision(t *testing.T) {
	page, err := os.ReadFile("../docs/queue.md")
	if err != nil {
		t.Fatal(err)
	}
	// A command is its line and the lines its trailing backslashes join.
	text := strings.ReplaceAll(string(page), "\\\n", " ")
	cmds := regexp.MustCompile(`(?m)^nats .*stream add PMJAIL_JOBS .*$`).FindAllString(text, -1)
	if len(cmds) < 2 {
		t.Fatalf("docs/queue.md: %d `nats stream add PMJAIL_JOBS` commands, want the one-host and the cluster's", len(cmds))
	}
	subject := DefaultSubject
	want := []string{
		"--subjects '" + subject + ".*'",
		"--retention work",
		"--discard new",
		"--discard-per-subject",
		"--republish-source '" + subject + ".*'",
		"--republish-destination '" + NoticeSubject(subject) + ".{{wildcard(1)}}'",
		"--republish-headers",
	}
	for _, cmd := range cmds {
		for _, w := range want {
			if !strings.Contains(cmd, w) {
				t.Errorf("docs/queue.md: %q lacks %s, which Provision sets and the worker checks", cmd, w)
			}
		}
	}
}
