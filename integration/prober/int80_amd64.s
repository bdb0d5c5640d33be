#include "textflag.h"

// func int80raw(nr uintptr) uintptr
// The i386 system-call entry, from a 64-bit process: the filter must see
// the i386 architecture and refuse it.
TEXT ·int80raw(SB), NOSPLIT, $0-16
	MOVQ nr+0(FP), AX
	XORQ BX, BX
	XORQ CX, CX
	XORQ DX, DX
	INT $0x80
	MOVQ AX, ret+8(FP)
	RET
