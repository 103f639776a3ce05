// The replaced global operator new and delete (every form the standard library may call), each a
// malloc or free plus the count OwnHeapBytes reads. They refuse nothing beyond what malloc refuses:
// the engine checks the count against the heap budget where what it builds can still be abandoned
// cleanly (see engine.cpp), rather than throwing from deep inside a parser or a container.
#include "worker/own_memory.h"

#include <malloc.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace basal::worker {
namespace {

// malloc's per-block header, which malloc_usable_size does not include (as in engine.cpp).
constexpr uint64_t kMallocOverhead = 8;

uint64_t own_heap_bytes = 0;  // one thread: no atomics needed

void* Allocate(std::size_t size, std::size_t alignment) noexcept {
  if (size == 0) size = 1;
#if defined(_WIN32)
  // The Windows C runtime has no aligned_alloc whose blocks free() takes: an over-aligned block is
  // carved out of a larger malloc block whose address is kept just before it (ReleaseAligned).
  if (alignment > alignof(std::max_align_t)) {
    if (size > SIZE_MAX - alignment - sizeof(void*)) return nullptr;
    void* base = std::malloc(size + alignment + sizeof(void*));
    if (!base) return nullptr;
    const uintptr_t first = reinterpret_cast<uintptr_t>(base) + sizeof(void*);
    void* q = reinterpret_cast<void*>((first + alignment - 1) / alignment * alignment);
    static_cast<void**>(q)[-1] = base;
    own_heap_bytes += malloc_usable_size(base) + kMallocOverhead;
    return q;
  }
  void* p = std::malloc(size);
#else
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
#endif
  if (p) own_heap_bytes += malloc_usable_size(p) + kMallocOverhead;
  return p;
}

void Release(void* p) noexcept {
  if (!p) return;
  own_heap_bytes -= malloc_usable_size(p) + kMallocOverhead;
  std::free(p);
}

// The align_val_t deletes: on Windows an over-aligned block lies inside the malloc block it names.
void ReleaseAligned(void* p, std::size_t alignment) noexcept {
#if defined(_WIN32)
  if (p && alignment > alignof(std::max_align_t)) {
    Release(static_cast<void**>(p)[-1]);
    return;
  }
#endif
  (void)alignment;
  Release(p);
}

void* AllocateOrThrow(std::size_t size, std::size_t alignment) {
  void* p = Allocate(size, alignment);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

uint64_t OwnHeapBytes() { return own_heap_bytes; }

}  // namespace basal::worker

using basal::worker::Allocate;
using basal::worker::AllocateOrThrow;
using basal::worker::Release;
using basal::worker::ReleaseAligned;

void* operator new(std::size_t size) { return AllocateOrThrow(size, 0); }
void* operator new[](std::size_t size) { return AllocateOrThrow(size, 0); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return Allocate(size, 0); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return Allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return AllocateOrThrow(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return AllocateOrThrow(size, static_cast<std::size_t>(a)); }
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept { Release(p); }
void operator delete[](void* p) noexcept { Release(p); }
void operator delete(void* p, std::size_t) noexcept { Release(p); }
void operator delete[](void* p, std::size_t) noexcept { Release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Release(p); }
void operator delete(void* p, std::align_val_t a) noexcept { ReleaseAligned(p, static_cast<std::size_t>(a)); }
void operator delete[](void* p, std::align_val_t a) noexcept { ReleaseAligned(p, static_cast<std::size_t>(a)); }
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept { ReleaseAligned(p, static_cast<std::size_t>(a)); }
void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept { ReleaseAligned(p, static_cast<std::size_t>(a)); }
void operator delete(void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  ReleaseAligned(p, static_cast<std::size_t>(a));
}
void operator delete[](void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  ReleaseAligned(p, static_cast<std::size_t>(a));
}
