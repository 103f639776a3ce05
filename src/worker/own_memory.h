// What the worker's own C++ code holds on the heap: frames queued to and from the parent, host-call
// records, JSON texts of arguments and results. The worker replaces the global operator new and
// delete to count it, so the engine can charge it to the same heap budget as the JavaScript heap
// (whose allocator is QuickJS's, counted apart). The worker has one thread (its seccomp filter
// admits no clone), so the count is a plain integer.
//
//   const uint64_t before = OwnHeapBytes();
//   std::string frame = BuildFrame();           // counted
//   const uint64_t grown = OwnHeapBytes() - before;
#pragma once

#include <cstdint>

namespace basal::worker {

// Bytes held by live C++ allocations (as malloc sizes them, with its per-block overhead).
uint64_t OwnHeapBytes();

}  // namespace basal::worker
