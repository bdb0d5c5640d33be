// Command pmjail-init is a job's init stage and nothing else: pmjail execs
// it in the job's new namespaces (see package initstage). It is small so
// that it starts quickly; pmjail uses it when it sits next to pmjail's own
// binary and comes from the same build.
package main

import (
	"fmt"
	"os"

	"github.com/pmjail/pmjail/jail/initstage"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == initstage.Role {
		initstage.Main() // never returns
	}
	fmt.Fprintln(os.Stderr, "pmjail-init: the init stage of pmjail's jobs; pmjail runs it, not a user")
	os.Exit(125)
}
