package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const roleNamespace = "selftest-namespace-child"

var namespaceKinds = []string{"user", "pid", "mnt", "net"}

// checkNamespaces starts a child in new user, pid, mount and network
// namespaces, root inside mapped to nobody outside, as a jail does, and reads
// back what the child saw.
func checkNamespaces() (string, error) {
	cmd := exec.Command("/proc/self/exe", roleNamespace)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		// The child's host uid 0 has no mapping in the new namespace; it
		// becomes the namespace's root (host 65534) only by setuid(0) there,
		// which execve needs to keep its capabilities in the namespace.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		Pdeathsig:  syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("namespace child: %w, output %q", err, out)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			seen[k] = v
		}
	}
	for _, kind := range namespaceKinds {
		mine, err := os.Readlink("/proc/self/ns/" + kind)
		if err != nil {
			return "", fmt.Errorf("read own %s namespace: %w", kind, err)
		}
		if seen[kind] == "" || seen[kind] == mine {
			return "", fmt.Errorf("child %s namespace %q, parent's %q", kind, seen[kind], mine)
		}
	}
	want := map[string]string{"pid1": "1", "uid": "0", "links": "lo", "tmpfs": "ok"}
	for k, v := range want {
		if seen[k] != v {
			return "", fmt.Errorf("child saw %s=%q, want %q (output %q)", k, seen[k], v, out)
		}
	}
	return "child is PID 1, uid 0 mapped to 65534, only lo, private tmpfs mount", nil
}

// runNamespaceChild prints key=value lines about the namespaces it is in.
func runNamespaceChild() int {
	for _, kind := range namespaceKinds {
		link, _ := os.Readlink("/proc/self/ns/" + kind)
		fmt.Printf("%s=%s\n", kind, link)
	}
	fmt.Printf("pid1=%d\nuid=%d\n", os.Getpid(), os.Getuid())
	ifaces, err := net.Interfaces()
	if err != nil {
		fmt.Printf("links_error=%v\n", err)
	}
	names := make([]string, 0, len(ifaces))
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	fmt.Printf("links=%s\n", strings.Join(names, ","))
	// A mount the parent must not see: only in our own mount namespace.
	tmpfs := "ok"
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		tmpfs = "make-private: " + err.Error()
	} else if err := unix.Mount("selftest", "/tmp", "tmpfs", 0, "size=1m"); err != nil {
		tmpfs = "mount: " + err.Error()
	}
	fmt.Printf("tmpfs=%s\n", tmpfs)
	return 0
}
