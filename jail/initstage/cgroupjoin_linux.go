package initstage

/*
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#define PMJAIL_CGROUP_SUPER_MAGIC 0x27e0eb
#define PMJAIL_INIT_ROLE "__pmjail_init"  // Role

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
// PMJAIL_CGROUP_JOIN. Only the init role acts on it (glibc passes argv to
// constructors), and only on cgroup files: the variable in anyone else's
// environment changes nothing.
__attribute__((constructor)) static void pmjail_join_cgroups(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 2 || strcmp(argv[1], PMJAIL_INIT_ROLE) != 0) {
		return;
	}
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
		struct statfs fs;
		int err = 0;
		if (fstatfs((int)fd, &fs) != 0) {
			err = errno;
		} else if (fs.f_type != PMJAIL_CGROUP_SUPER_MAGIC) {
			err = EMEDIUMTYPE;
		} else if (write((int)fd, "0", 1) != 1) {
			err = errno != 0 ? errno : EIO;
		}
		if (err != 0 && pmjail_join_errno == 0) {
			pmjail_join_errno = err;
		}
		close((int)fd);
		pmjail_joined++;
	}
}

static int pmjail_cgroup_joined(void) { return pmjail_joined; }
static const char *pmjail_init_role(void) { return PMJAIL_INIT_ROLE; }
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

// JoinEnv is the environment entry that tells the init stage's constructor
// to join the cgroups whose task files are the count fds from first on.
func JoinEnv(first, count int) string {
	return joinEnv + "=" + strconv.Itoa(first) + ":" + strconv.Itoa(count)
}

// constructorRole is the argv[1] the constructor acts on; it must be Role
// (checked by a test).
func constructorRole() string { return C.GoString(C.pmjail_init_role()) }

// cgroupJoinResult reports what the constructor did: how many task files it
// wrote and the first error.
func cgroupJoinResult() (int, error) {
	n := int(C.pmjail_cgroup_joined())
	switch errno := unix.Errno(C.pmjail_cgroup_join_errno()); errno {
	case 0:
	case unix.EMEDIUMTYPE:
		return n, fmt.Errorf("join the job's cgroup before start-up: a task file is not on a cgroup file system: %w", errno)
	default:
		return n, fmt.Errorf("join the job's cgroup before start-up: %w", errno)
	}
	return n, nil
}
