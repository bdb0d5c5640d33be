//go:build cgo

package seccomp

// pattern matches a value v when v&mask == value.
type pattern struct{ mask, value uint64 }

// complement32 returns masked-equality patterns that together match exactly
// the 32-bit values not in excluded. A filter rule can compare an argument
// with one value per condition, so "allow every ioctl request but these"
// becomes one allow rule per pattern; they never overlap with the denied
// values, which keeps the result independent of libseccomp's rule order.
//
// It walks the bits from the top: wherever no excluded value shares the
// prefix chosen so far, that whole subtree is one pattern. That is at most
// 32 patterns per excluded value.
func complement32(excluded []uint64) []pattern {
	var out []pattern
	var walk func(bit int, mask, value uint64, set []uint64)
	walk = func(bit int, mask, value uint64, set []uint64) {
		if len(set) == 0 {
			out = append(out, pattern{mask, value})
			return
		}
		if bit < 0 {
			return // the prefix is a whole excluded value
		}
		b := uint64(1) << bit
		var zero, one []uint64
		for _, v := range set {
			if v&b == 0 {
				zero = append(zero, v)
			} else {
				one = append(one, v)
			}
		}
		walk(bit-1, mask|b, value, zero)
		walk(bit-1, mask|b, value|b, one)
	}
	var set []uint64
	for _, v := range excluded {
		set = append(set, v&0xffffffff)
	}
	walk(31, 0, 0, set)
	return out
}
