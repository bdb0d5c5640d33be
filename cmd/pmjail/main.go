// Command pmjail runs untrusted JavaScript, TypeScript and Python (and, for
// operators, native programs) in a hardened Linux jail and reports one
// structured result. See the README for the commands.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
)

// Exit codes of pmjail's own making; a run that ended by itself exits with
// the guest's code, and one that met a limit with its status's
// (jail.Status.ExitCode).
const (
	exitFailure  = 125 // refused, bad input, or pmjail's own failure
	exitNotExec  = 126 // the runtime could not be executed
	exitNotFound = 127 // the runtime could not be found
)

// roles are the parts pmjail's own binary plays in a jail's life, chosen
// by argv[1] before anything else runs.
var roles = map[string]func(){
	initstage.Role:    initstage.Main,
	posture.ProbeRole: posture.ProbeChild,
}

var commands = map[string]func(args []string) int{
	"run":      cmdRun,
	"exec":     cmdExec,
	"packages": cmdPackages,
	"posture":  cmdPosture,
	"prepare":  cmdPrepare,
	"serve":    cmdServe,
	"submit":   cmdSubmit,
	"version":  cmdVersion,
	"runs":     cmdRuns,
}

func main() {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			role()
			os.Exit(exitFailure) // roles never return
		}
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitFailure)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		switch os.Args[1] {
		case "help", "-h", "--help":
			usage()
			os.Exit(0)
		case "--version", "-version", "-v":
			os.Exit(cmdVersion(os.Args[2:]))
		}
		fmt.Fprintf(os.Stderr, "pmjail: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(exitFailure)
	}
	os.Exit(cmd(os.Args[2:]))
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  pmjail run [flags] FILE|DIR|-      run a .js, .mjs, .jsx, .ts, .tsx or .py file, or a
                                     DIR of files (main.ts, main.py, ...), in the jail
  pmjail exec [flags] [--ro-bind SRC[:DST]]... -- PROGRAM [ARGS]
                                     run a native program in the same jail
  pmjail posture [--json] [--mode auto|required]
                                     show what this host can enforce
  pmjail prepare                     build the Pyodide snapshot and warm code cache
  pmjail packages add|list|remove    manage the vetted packages jobs may import
  pmjail serve [--socket PATH] [--config FILE] [--check-config]
                                     serve the socket API (as a systemd service)
  pmjail submit [--socket PATH] [run flags] FILE|DIR|-
                                     send a job to a daemon, print it like run
                                     (--async: print the run's id, do not wait)
  pmjail runs get|events|cancel [--socket PATH] ID
                                     an async run: its state, its output, or cancel it
  pmjail submit --nats URLS [--tenant T] [--id ID] [run flags] FILE|DIR|-
                                     send it to the workers of a NATS JetStream queue
  pmjail version | --version | -v    print this build's version

run flags: --runtime deno|python --profile NAME|FILE --mode auto|required --require LAYERS
  --memory 128M --cpu-time 5s --timeout 30s --pids N --output-limit 1M
  --cap log --cap request=https://origin[,https://o2][:GET,POST]
  --input JSON|@file --json
`)
}

// commandFailure answers a command's error: asked for help (-h, --help),
// the command's usage on stdout and exit 0; otherwise one clear line.
func commandFailure(fs *flag.FlagSet, synopsis string, err error) int {
	if cliflag.Help(fs, synopsis, err) {
		return 0
	}
	return fail("%s: %v", fs.Name(), err)
}

// fail prints one clear line and returns the failure exit code.
func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "pmjail: "+format+"\n", args...)
	return exitFailure
}
