#!/bin/sh
# integration/vm/suite.sh - the test suites pmjail runs inside the cgroup v2
# VM (see run.sh): the VM self-check, the cgroup package's tests (their v2
# paths run only here), the jail package's tests named by $VM_JAIL_TESTS and
# the integration tests named by $VM_TESTS.
# usage: suite.sh BINDIR   (BINDIR holds selftest, cgroup.test, jail.test,
#                          integration.test and pmjail)
dir=$1
status=0
summary=""

run() {
  name=$1; shift
  echo "@@SUITE $name"
  "$@" > "/tmp/$name.log" 2>&1
  rc=$?
  cat "/tmp/$name.log"
  # go test's verdict lines, and the self-check's own PASS/FAIL lines
  pass=$(grep -c -e '^ *--- PASS' -e '^PASS ' "/tmp/$name.log")
  fail=$(grep -c -e '^ *--- FAIL' -e '^FAIL ' "/tmp/$name.log")
  skip=$(grep -c -e '^ *--- SKIP' "/tmp/$name.log")
  summary="$summary
@@COUNT $name: $pass passed, $fail failed, $skip skipped (exit $rc)"
  [ "$rc" -eq 0 ] || status=1
}

run selftest "$dir/selftest" -deno=
run cgroup sh -c "cd /tmp && '$dir/cgroup.test' -test.v -test.count=1"
run jail sh -c "cd /tmp && '$dir/jail.test' -test.v -test.count=1 -test.run '${VM_JAIL_TESTS:-TestRun|TestPool}'"
run integration sh -c "cd /tmp && '$dir/integration.test' -test.v -test.count=1 -test.timeout=20m -test.run '${VM_TESTS:-.}' -test.skip '${VM_SKIP:-^$}'"
echo "$summary"
exit $status
