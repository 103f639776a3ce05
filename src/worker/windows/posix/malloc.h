// The Windows worker's posix/ headers: the few Linux interfaces the shared worker sources use,
// given their Windows meaning, so engine.cpp, web_natives.cpp and own_memory.cpp build unchanged
// for Windows (this folder comes first on the Windows worker's include path only).
// malloc_usable_size: the C runtime's _msize.
#pragma once
#include_next <malloc.h>

static inline size_t malloc_usable_size(void* p) { return p ? _msize(p) : 0; }
