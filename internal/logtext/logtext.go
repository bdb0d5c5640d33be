// Package logtext bounds a client's text in the operator's log lines: a
// refusal's field and message, a path, a queue message's subject and
// id may hold what a client sent as it sent it, a megabyte of it.
package logtext

import (
	"fmt"
	"unicode/utf8"
)

// Max is the most bytes of a client's text a log line holds.
const Max = 512

// Clip is s within Max bytes, cut at a character's start and saying how
// long it was.
func Clip(s string) string {
	if len(s) <= Max {
		return s
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}
