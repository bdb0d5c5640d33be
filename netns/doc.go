// Package netns inspects a job's network namespace: whether the child is
// really cut off from the host's network — a namespace of its own holding
// no interface but loopback — which is what the posture reports for the
// "net" layer. The namespace itself is created by the jail (CLONE_NEWNET);
// this package proves the result, through github.com/vishvananda/netns and
// netlink, rather than trusting the clone flags.
package netns
