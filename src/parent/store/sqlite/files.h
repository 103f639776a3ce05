// Creating a journal file owner-only before SQLite opens it (EnsurePrivateDirectory is public:
// sqlite_store.h).
#pragma once

#include <string>

#include "basal/result.h"

namespace basal::sqlite {

// Creates `path` empty with mode 0600 if nothing is there; an existing file is left as it is.
// A missing directory is left for SQLite's open to report.
Result<void> CreatePrivateFileIfMissing(const std::string& path);

}  // namespace basal::sqlite
