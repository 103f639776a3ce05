// The Windows worker's posix/ headers (see ../malloc.h). Linux system call numbers: the shared
// worker source uses syscall() only in BASAL_TEST_HOOKS builds (the probe suite's stand-in for a
// subverted engine), which the Windows cross build never makes.
#pragma once
#ifdef BASAL_TEST_HOOKS
#error "the Windows worker is never built with BASAL_TEST_HOOKS"
#endif
