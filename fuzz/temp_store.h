// A SQLite store in a fresh temporary directory, for the fuzz targets that need the built-in host
// calls (the kv.* calls are served from a store). Made once per fuzzing process; the directory is
// removed at exit. Each input rolls back what it wrote, so every input starts from an empty store.
//
//   basal::Store& store = basal::fuzz::TempStore();
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "parent/store/sqlite/sqlite_store.h"

namespace basal::fuzz {

inline Store& TempStore() {
  static std::string dir;
  static std::unique_ptr<Store> store = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/basal-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("basal fuzz: mkdtemp");
      std::abort();
    }
    dir = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    });
    auto opened = OpenSqliteStore({.path = dir + "/journal.db"});
    if (!opened) {
      std::fprintf(stderr, "basal fuzz: cannot open a store in %s: %s\n", dir.c_str(), opened.error().message.c_str());
      std::abort();
    }
    return std::move(*opened);
  }();
  return *store;
}

}  // namespace basal::fuzz
