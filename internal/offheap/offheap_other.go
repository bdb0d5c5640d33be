//go:build !linux

package offheap

import "errors"

func mapBytes(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapBytes([]byte) {}
