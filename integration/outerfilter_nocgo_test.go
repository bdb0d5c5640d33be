//go:build !cgo

package integration

import "errors"

// errNoOuterFilter: the outer filters are built with libseccomp (cgo).
var errNoOuterFilter = errors.New("outer filters need libseccomp: this test binary was built without cgo")

func denyNetworkNamespaces() error { return errNoOuterFilter }

// denyLayer installs the outer filter that removes layer: not without cgo.
func denyLayer(layer string) error { return errNoOuterFilter }
