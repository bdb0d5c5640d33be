#!/bin/sh
# integration/vm/suite.sh - the test suites pmjail runs inside the cgroup v2
# VM (see run.sh): the VM self-check, the cgroup package's tests (their v2
# paths run only here), the jail package's tests named by $VM_JAIL_TESTS,
# the init-stage start's (jail/internal/spawn) but the one that needs
# objdump, and the integration tests named by $VM_TESTS, less those
# $VM_SKIP names.
# usage: suite.sh BINDIR   (BINDIR holds selftest, cgroup.test, jail.test,
#                          spawn.test, integration.test and pmjail)
#
# Each test binary's suite fails unless every top-level test it lists for
# the filters reported a verdict: a filter that selects nothing, or a
# binary that stops early, must not pass by running less.
dir=$1
status=0
summary=""

# without DROP FROM prints the lines of FROM that are not lines of DROP
# (either may be empty, which rules out grep -f: busybox's takes its next
# argument as the pattern then).
without() {
  awk -v drop="$1" 'FILENAME == drop { seen[$0] = 1; next } !($0 in seen)' "$1" "$2"
}

# selftest NAME CMD... runs the VM's own check, which prints a PASS or FAIL
# line per check.
selftest() {
  name=$1; shift
  echo "@@SUITE $name"
  "$@" > "/tmp/$name.log" 2>&1
  rc=$?
  cat "/tmp/$name.log"
  pass=$(grep -c '^PASS ' "/tmp/$name.log")
  fail=$(grep -c '^FAIL ' "/tmp/$name.log")
  summary="$summary
@@COUNT $name: $pass passed, $fail failed (exit $rc)"
  [ "$rc" -eq 0 ] || status=1
}

# gotest NAME BINARY RUN SKIP [FLAG...] runs the tests of a go test binary
# that the regexp RUN selects and SKIP does not (top-level names: neither
# may hold a /), and counts them against what the binary lists for the
# same filters.
gotest() {
  name=$1 bin=$2 filter=$3 except=$4; shift 4
  echo "@@SUITE $name"
  # Benchmarks are listed but run only with -test.bench.
  (cd /tmp && "$bin" -test.list "$filter") | grep -v '^Benchmark' > "/tmp/$name.listed"
  (cd /tmp && "$bin" -test.list "$except") > "/tmp/$name.skipped"
  without "/tmp/$name.skipped" "/tmp/$name.listed" > "/tmp/$name.want"
  (cd /tmp && "$bin" -test.v -test.count=1 -test.run "$filter" -test.skip "$except" "$@") > "/tmp/$name.log" 2>&1
  rc=$?
  cat "/tmp/$name.log"
  # The verdicts of top-level tests only: a subtest's are indented.
  sed -n 's/^--- [A-Z]*: \([^ ]*\).*/\1/p' "/tmp/$name.log" > "/tmp/$name.ran"
  want=$(wc -l < "/tmp/$name.want")
  ran=$(wc -l < "/tmp/$name.ran")
  pass=$(grep -c '^--- PASS' "/tmp/$name.log")
  fail=$(grep -c '^--- FAIL' "/tmp/$name.log")
  skip=$(grep -c '^--- SKIP' "/tmp/$name.log")
  summary="$summary
@@COUNT $name: $ran of $want expected tests ran: $pass passed, $fail failed, $skip skipped (exit $rc)"
  [ "$rc" -eq 0 ] || status=1
  if [ "$want" -eq 0 ]; then
    summary="$summary
@@SHORT $name: -test.run '$filter' -test.skip '$except' selects no test"
    status=1
  fi
  missing=$(without "/tmp/$name.ran" "/tmp/$name.want" | tr '\n' ' ')
  if [ "$ran" -lt "$want" ] || [ -n "$missing" ]; then
    summary="$summary
@@SHORT $name: $ran of $want ran; no verdict from: $missing"
    status=1
  fi
}

selftest selftest "$dir/selftest" -deno=
gotest cgroup "$dir/cgroup.test" . '^$'
gotest jail "$dir/jail.test" "${VM_JAIL_TESTS:-TestRun|TestPool}" '^$'
gotest spawn "$dir/spawn.test" . '^TestSpawnChildMakesNoCalls$'
gotest integration "$dir/integration.test" "${VM_TESTS:-.}" "${VM_SKIP:-^$}" -test.timeout=20m
echo "$summary"
exit $status
