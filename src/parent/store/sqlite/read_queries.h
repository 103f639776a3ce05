// The journal's read queries, shared by the writer's own connection (Store::reader(), which sees
// the open batch) and a read-only connection (OpenSqliteReader). They read schema 1 to 7 files
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
  // The approvals (JournalReader's); empty answers for a journal older than schema 4.
  Result<std::optional<ApprovalRow>> Approval(int64_t id);
  Result<std::vector<ApprovalRow>> Versions(ApprovalKind kind, const std::string& name);
  Result<std::optional<ApprovalRow>> NewestVersion(ApprovalKind kind, const std::string& name);
  Result<std::vector<ApprovalRow>> Names(ApprovalKind kind);
  Result<std::vector<ApprovalEvent>> Events(ApprovalKind kind, const std::string& name);
  Result<std::optional<std::string>> Text(const std::string& hash);
  // basal serve's runs and tokens (JournalReader's); empty answers for a journal older than schema 5.
  Result<std::vector<RunRow>> ListRuns(const RunQuery& query);
  Result<std::optional<RunRow>> GetRun(int64_t run_id);
  Result<std::vector<TokenRow>> ListTokens();
  // A run's activations and their calls, the operator's resolutions (schema 6; empty before).
  Result<std::vector<ActivationRow>> RunActivations(int64_t run_id);
  Result<std::vector<CallRow>> RunCalls(int64_t run_id);
  Result<std::vector<CallResolution>> Resolutions(int64_t run_id);
  // The operator's kv writes (schema 7; empty before).
  Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>& ns, size_t limit);
  void Finalize();  // before the connection closes

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  bool has_catalog_ = false;
  bool has_runs_ = false;
  bool has_durable_ = false;
  bool has_kv_audit_ = false;
  Stmt kv_audit_all_, kv_audit_of_;
  Stmt run_activations_, run_calls_, resolutions_;
  Stmt by_id_, newest_, calls_of_;
  Stmt approval_, versions_, newest_version_, names_, events_, text_;
  // list_runs_[by flow][by state]: one statement per filter, so each is served by its index.
  Stmt run_by_id_, list_runs_[2][2], tokens_;
};

// One row of ActivationSelectSql.
ActivationRow ReadActivationRow(sqlite3_stmt* s);

// The 15 columns ReadApprovalRow reads, in order.
inline constexpr const char* kApprovalSelectSql =
    "SELECT id, kind, name, version, coalesce(source_hash, ''), manifest_text_hash, manifest_hash, approver_uid, "
    "approver_name, approved_us, note, revoked_us, coalesce(revoker_uid, 0), coalesce(revoker_name, ''), "
    "coalesce(revoke_note, '') FROM approvals";
ApprovalRow ReadApprovalRow(sqlite3_stmt* s);

// The columns of RunSelectSql (schema.h), in order.
RunRow ReadRunRow(sqlite3_stmt* s);
// The columns of CallSelectSql, in order; the record's seq follows them (kCallSeqColumn).
CallRow ReadCallRow(sqlite3_stmt* s);
inline constexpr int kCallSeqColumn = 16;

// The 10 columns ReadResolution reads, in order (schema 6).
inline constexpr const char* kResolutionSelectSql =
    "SELECT seq, run_id, activation_id, call_id, kind, coalesce(value, ''), actor_uid, actor_name, at_us, note "
    "FROM call_resolutions";
CallResolution ReadResolution(sqlite3_stmt* s);

// The 10 columns ReadTokenRow reads, in order (schema 5).
inline constexpr const char* kTokenSelectSql =
    "SELECT id, name, hash, scopes, creator_uid, creator_name, created_us, revoked_us, coalesce(revoker_uid, 0), "
    "revoker_name FROM tokens";
TokenRow ReadTokenRow(sqlite3_stmt* s);

}  // namespace basal::sqlite
