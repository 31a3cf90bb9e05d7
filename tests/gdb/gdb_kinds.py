"""GDB's frame type numbers (gdb.NORMAL_FRAME ...) for tests that run outside GDB."""

NORMAL_FRAME, DUMMY_FRAME, INLINE_FRAME, TAILCALL_FRAME, SIGTRAMP_FRAME, ARCH_FRAME, SENTINEL_FRAME = range(7)
