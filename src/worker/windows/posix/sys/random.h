// The Windows worker's posix/ headers (see ../malloc.h). getrandom: the system's random source,
// RtlGenRandom (advapi32's SystemFunction036), which needs no handle the confined worker lacks.
#pragma once
#include <errno.h>
#include <stddef.h>
#include <sys/types.h>
#include <windows.h>

#define GRND_NONBLOCK 0x0001
#define GRND_RANDOM 0x0002

extern "C" BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

static inline ssize_t getrandom(void* buffer, size_t length, unsigned int) {
  if (length > 0x7fffffff) length = 0x7fffffff;
  if (!SystemFunction036(buffer, static_cast<ULONG>(length))) {
    errno = EIO;
    return -1;
  }
  return static_cast<ssize_t>(length);
}
