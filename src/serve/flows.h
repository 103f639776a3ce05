// The approved flows the daemon runs, by name: each the newest approved version in the store
// (docs/approvals.md), loaded into the module once and kept while it stays the newest. A new
// approval replaces it at the next use (the old one removed from the module); a revocation refuses
// it from the next use on, with no restart.
//
//   ApprovedFlows flows(module, store.reader());
//   Result<FlowRef> hello = flows.Get("hello");   // kNotFound, kRefused (revoked), kDatabase
#pragma once

#include <map>
#include <string>

#include "basal/module.h"
#include "parent/store/store.h"

namespace basal::serve {

class ApprovedFlows {
 public:
  ApprovedFlows(Module& module, JournalReader& reader) : module_(module), reader_(reader) {}

  // The newest approved version of `name`: kNotFound when none was approved, kRefused when it is
  // revoked; errors of the store or of loading the flow otherwise.
  Result<FlowRef> Get(const std::string& name);

 private:
  Module& module_;
  JournalReader& reader_;
  std::map<std::string, FlowRef> loaded_;
};

}  // namespace basal::serve
