// FUZZ_CHECK: the fuzz targets' invariant check. A broken invariant prints what broke and aborts,
// which libFuzzer reports as a crash and saves as a crash-<sha1> input to reproduce.
//
//   FUZZ_CHECK(frames == expected, "decoded " + std::to_string(frames.size()) + " frames");
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace basal::fuzz {

[[noreturn]] inline void Fail(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n  %s\n", file, line, condition, detail.c_str());
  std::abort();
}

}  // namespace basal::fuzz

#define FUZZ_CHECK(condition, detail)                                        \
  do {                                                                       \
    if (!(condition)) ::basal::fuzz::Fail(__FILE__, __LINE__, #condition, detail); \
  } while (false)
