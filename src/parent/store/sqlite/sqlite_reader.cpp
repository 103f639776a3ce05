// OpenSqliteReader: a journal read without ever writing to it (see sqlite_store.h).
//
// A WAL database opened read-only still needs its -shm (the WAL index). SQLite (3.22+) reads with
// an -shm and -wal that exist but that this user may not write. When they do not exist (the last
// writer closed cleanly and removed them) and this user cannot create them (a directory it may
// only read), SQLite refuses; then no writer has the journal open, everything is in the database
// file, and the reader opens it with `immutable=1` (no locks, no -shm). A writer that starts while
// such a reader reads is not seen, and a checkpoint it runs meanwhile could show the reader a
// torn page: the readable listing is a best effort view, as the docs say.
#include <sys/stat.h>

#include <cerrno>
#include <cctype>
#include <cstring>

#include "parent/store/sqlite/read_queries.h"
#include "parent/store/sqlite/schema.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "parent/store/sqlite/sqlite_support.h"

namespace basal {
namespace {

using sqlite::DbError;
using sqlite::JournalError;

class SqliteReader final : public JournalReader {
 public:
  explicit SqliteReader(std::string path) : path_(std::move(path)) {}
  ~SqliteReader() override { Close(); }
  SqliteReader(const SqliteReader&) = delete;
  SqliteReader& operator=(const SqliteReader&) = delete;

  Result<void> Open();
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit) override {
    return reads_.Activations(id, limit);
  }
  Result<std::vector<CallRow>> Calls(int64_t activation_id) override { return reads_.Calls(activation_id); }
  Result<std::optional<ApprovalRow>> Approval(int64_t id) override { return reads_.Approval(id); }
  Result<std::vector<ApprovalRow>> Versions(ApprovalKind kind, const std::string& name) override {
    return reads_.Versions(kind, name);
  }
  Result<std::optional<ApprovalRow>> NewestVersion(ApprovalKind kind, const std::string& name) override {
    return reads_.NewestVersion(kind, name);
  }
  Result<std::vector<ApprovalRow>> Names(ApprovalKind kind) override { return reads_.Names(kind); }
  Result<std::vector<ApprovalEvent>> Events(ApprovalKind kind, const std::string& name) override {
    return reads_.Events(kind, name);
  }
  Result<std::optional<std::string>> Text(const std::string& hash) override { return reads_.Text(hash); }
  Result<std::vector<RunRow>> ListRuns(const RunQuery& query) override { return reads_.ListRuns(query); }
  Result<std::optional<RunRow>> GetRun(int64_t run_id) override { return reads_.GetRun(run_id); }
  Result<std::vector<TokenRow>> ListTokens() override { return reads_.ListTokens(); }
  Result<std::vector<ActivationRow>> RunActivations(int64_t run_id) override { return reads_.RunActivations(run_id); }
  Result<std::vector<CallRow>> RunCalls(int64_t run_id) override { return reads_.RunCalls(run_id); }
  Result<std::vector<CallResolution>> Resolutions(int64_t run_id) override { return reads_.Resolutions(run_id); }
  Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>& ns, size_t limit) override {
    return reads_.KvAudit(ns, limit);
  }

 private:
  void Close() {
    reads_.Finalize();
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  int OpenAndReadHeader(bool immutable, sqlite::Header* header);

  const std::string path_;
  sqlite3* db_ = nullptr;
  sqlite::ReadQueries reads_;
};

// `file:` URI of `path` with every byte outside [A-Za-z0-9/._~-] percent-encoded.
std::string FileUri(const std::string& path, const char* query) {
  static const char* kHex = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '~' || c == '-') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += kHex[c >> 4];
      uri += kHex[c & 15];
    }
  }
  return uri + "?" + query;
}

int SqliteReader::OpenAndReadHeader(bool immutable, sqlite::Header* header) {
  Close();
  const std::string name = immutable ? FileUri(path_, "immutable=1") : path_;
  int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | (immutable ? SQLITE_OPEN_URI : 0);
  sqlite::PreferNoMemoryStatistics();
  int rc = sqlite3_open_v2(name.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) return rc;
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, sqlite::kBusyTimeoutMs);
  return sqlite::RetryWhileBusy([&] { return sqlite::ReadHeader(db_, header); });
}

Result<void> SqliteReader::Open() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return JournalError(ErrorCode::kNotFound, path_, "does not exist (run a flow first, or pass --db FILE)");
    }
    return JournalError(ErrorCode::kIo, path_, std::string("cannot read it: ") + std::strerror(errno));
  }
  const std::string empty_message = "is empty: not a basal journal yet; run a flow first or choose another --db";
  if (st.st_size == 0) return JournalError(ErrorCode::kDatabase, path_, empty_message);

  sqlite::Header h;
  int rc = OpenAndReadHeader(/*immutable=*/false, &h);
  const int primary = rc & 0xff;
  if ((primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN) && rc != SQLITE_CANTOPEN_ISDIR) {
    struct stat wal {};
    if (::stat((path_ + "-wal").c_str(), &wal) != 0 && errno == ENOENT) rc = OpenAndReadHeader(true, &h);
  }
  if ((rc & 0xff) == SQLITE_NOTADB) {
    return DbError(path_, db_, rc, "is not an SQLite database", "point --db at a basal journal");
  }
  if (rc != SQLITE_OK) {
    Error error = DbError(path_, db_, rc, "cannot read it",
                          "check that this user may read the file and its directory (and its -wal and -shm files, "
                          "if they exist)");
    return error;
  }
  if (h.empty()) return JournalError(ErrorCode::kDatabase, path_, empty_message);
  if (auto known = sqlite::CheckHeader(path_, h); !known) return known;
  return reads_.Prepare(db_, path_, h.user_version);
}

}  // namespace

Result<std::unique_ptr<JournalReader>> OpenSqliteReader(const std::string& path) {
  auto reader = std::make_unique<SqliteReader>(path);
  if (auto r = reader->Open(); !r) return r.error();
  return std::unique_ptr<JournalReader>(std::move(reader));
}

}  // namespace basal
