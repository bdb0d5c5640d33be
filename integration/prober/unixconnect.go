package main

import "golang.org/x/sys/unix"

func init() {
	// unix_connect=PATH connects to a pathname Unix socket: a host
	// service's socket that a bind brought into the jail. The socket is the
	// test's own listener, which fails the test if it is reached.
	probes["unix_connect"] = func(args []string) report {
		if len(args) != 1 {
			return report{Errno: "other", Detail: "usage: unix_connect=PATH"}
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Connect(fd, &unix.SockaddrUnix{Name: args[0]}))
	}
}
