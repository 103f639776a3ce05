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
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p) own_heap_bytes += malloc_usable_size(p) + kMallocOverhead;
  return p;
}

void Release(void* p) noexcept {
  if (!p) return;
  own_heap_bytes -= malloc_usable_size(p) + kMallocOverhead;
  std::free(p);
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
void operator delete(void* p, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Release(p); }
