// The journal's read queries, shared by the writer's own connection (Store::reader(), which sees
// the open batch) and a read-only connection (OpenSqliteReader). They read schema 1 and 2 files
// into the same rows (schema.cpp: ActivationSelectSql, CallSelectSql).
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"
#include "parent/store/sqlite/sqlite_support.h"
#include "parent/store/store.h"

namespace basal::sqlite {

class ReadQueries {
 public:
  Result<void> Prepare(sqlite3* db, const std::string& path, int64_t schema_version);
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit);
  Result<std::vector<CallRow>> Calls(int64_t activation_id);
  void Finalize();  // before the connection closes

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  Stmt by_id_, newest_, calls_of_;
};

// One row of ActivationSelectSql.
ActivationRow ReadActivationRow(sqlite3_stmt* s);

}  // namespace basal::sqlite
