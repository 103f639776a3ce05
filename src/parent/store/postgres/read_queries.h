// The PostgreSQL store's reads (JournalReader), shared by the writer's own connection (which sees
// its open batch) and a read-only one (OpenPostgresReader): the statements, and the row readers
// that turn their columns into the store's rows, in the same column order as the SQLite backend's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"
#include "parent/store/postgres/pg_support.h"
#include "parent/store/store.h"

namespace basal::pg {

// "SELECT <21 columns> FROM activations" (an activation of a run reads the run's input).
extern const char* const kActivationSelect;
// "SELECT <16 columns> FROM calls", "SELECT <25 columns> FROM runs", and the others.
extern const char* const kCallSelect;
extern const char* const kRunSelect;
extern const char* const kTokenSelect;

ActivationRow ReadActivationRow(const Rows& r, int row);
CallRow ReadCallRow(const Rows& r, int row);
RunRow ReadRunRow(const Rows& r, int row);
TokenRow ReadTokenRow(const Rows& r, int row);

// The statements JournalReads runs, to prepare on its connection.
std::vector<StatementDef> ReadStatements();

// JournalReader on a connection: each read is one statement (Read).
class JournalReads : public JournalReader {
 public:
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit) override;
  Result<std::vector<CallRow>> Calls(int64_t activation_id) override;
  Result<std::optional<ApprovalRow>> Approval(int64_t id) override;
  Result<std::vector<ApprovalRow>> Versions(ApprovalKind kind, const std::string& name) override;
  Result<std::vector<ApprovalRow>> Names(ApprovalKind kind) override;
  Result<std::vector<ApprovalEvent>> Events(ApprovalKind kind, const std::string& name) override;
  Result<std::optional<std::string>> Text(const std::string& hash) override;
  Result<std::vector<RunRow>> ListRuns(const RunQuery& query) override;
  Result<std::optional<RunRow>> GetRun(int64_t run_id) override;
  Result<std::vector<ActivationRow>> RunActivations(int64_t run_id) override;
  Result<std::vector<CallRow>> RunCalls(int64_t run_id) override;
  Result<std::vector<CallResolution>> Resolutions(int64_t run_id) override;
  Result<std::vector<TokenRow>> ListTokens() override;
  Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>& ns, size_t limit) override;

 protected:
  // Runs the read `name` and returns its rows, or an error naming `what`.
  virtual Result<Rows> Read(const std::string& name, const Params& params, const std::string& what) = 0;
  virtual Error NotFound(const std::string& message) const = 0;
};

// SQL's LIMIT for a size_t: NULL (no limit) past what bigint holds.
std::optional<int64_t> LimitParam(size_t limit);

}  // namespace basal::pg
