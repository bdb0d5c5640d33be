package initstage

import (
	"testing"
)

// TestStagesNamed: every stage has its text (a failure's message starts
// with it), and a number past the list is told apart rather than blank.
func TestStagesNamed(t *testing.T) {
	for s := StageNone + 1; s < stageEnd; s++ {
		if s.String() == "" {
			t.Errorf("stage %d has no name", s)
		}
	}
	if StageNone.String() != "" || stageEnd.String() == "" {
		t.Errorf("StageNone %q, stage past the list %q", StageNone, stageEnd)
	}
	if text, err := StageBindSource.MarshalText(); err != nil || string(text) != "bind source" {
		t.Errorf("MarshalText: %q, %v", text, err)
	}
}

// TestReportRefusesUnknownStage: a report naming a stage this build does
// not know is refused, not read as another.
func TestReportRefusesUnknownStage(t *testing.T) {
	data, err := (&Report{Stage: stageEnd}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := got.UnmarshalBinary(data[4:]); err == nil {
		t.Errorf("decoded %+v, want an error", got)
	}
}
