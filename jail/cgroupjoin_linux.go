package jail

/*
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

// Set by pmjail_join_cgroups: how many cgroup task files the init stage
// wrote itself into, and the errno of the first that failed (0: none).
static int pmjail_joined;
static int pmjail_join_errno;

// The init stage joins the job's cgroup v1 hierarchies here, before the Go
// runtime starts a thread: writing "0" to a v1 "tasks" file moves only the
// calling thread, which the kernel does without the global threadgroup
// lock, and so without the RCU grace period a cgroup.procs write of
// another process waits for (~8 ms). Every thread the runtime starts
// afterwards is born in the job. The supervisor opened the files (the
// kernel checks the opener's credentials) and names them "first:count" in
// PMJAIL_CGROUP_JOIN.
__attribute__((constructor)) static void pmjail_join_cgroups(void) {
	const char *spec = getenv("PMJAIL_CGROUP_JOIN");
	if (spec == NULL) {
		return;
	}
	char *end;
	long first = strtol(spec, &end, 10);
	long count = *end == ':' ? strtol(end + 1, &end, 10) : -1;
	if (*end != '\0' || first < 3 || count < 1 || count > 16) {
		pmjail_join_errno = EINVAL;
		return;
	}
	for (long fd = first; fd < first + count; fd++) {
		if (write((int)fd, "0", 1) != 1 && pmjail_join_errno == 0) {
			pmjail_join_errno = errno != 0 ? errno : EIO;
		}
		close((int)fd);
		pmjail_joined++;
	}
}

static int pmjail_cgroup_joined(void) { return pmjail_joined; }
static int pmjail_cgroup_join_errno(void) { return pmjail_join_errno; }
*/
import "C"

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// joinEnv carries the task files' fd range to the init stage's constructor.
const joinEnv = "PMJAIL_CGROUP_JOIN"

// joinEnvValue is joinEnv's value for count files from fd first on.
func joinEnvValue(first, count int) string {
	return joinEnv + "=" + strconv.Itoa(first) + ":" + strconv.Itoa(count)
}

// cgroupJoinResult reports what the constructor did: how many task files it
// wrote and the first error.
func cgroupJoinResult() (int, error) {
	n := int(C.pmjail_cgroup_joined())
	if errno := C.pmjail_cgroup_join_errno(); errno != 0 {
		return n, fmt.Errorf("join the job's cgroup before start-up: %w", unix.Errno(errno))
	}
	return n, nil
}
