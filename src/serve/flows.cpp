// The approved flows the daemon runs (flows.h).
#include "serve/flows.h"

namespace basal::serve {

Result<FlowRef> ApprovedFlows::Get(const std::string& name) {
  auto versions = reader_.Versions(ApprovalKind::kFlow, name);
  if (!versions) return versions.error();
  if (versions->empty())
    return MakeError(ErrorCode::kNotFound, "no flow named " + name + " is approved in this store (basal flow approve)");
  const ApprovalRow& newest = versions->back();
  if (newest.revoked_unix_us)
    return MakeError(ErrorCode::kRefused, "flow " + name + " version " + std::to_string(newest.version) +
                                              " was revoked; approve a new version to run it again");
  auto it = loaded_.find(name);
  if (it != loaded_.end() && it->second->approval_id == newest.id) return it->second;
  auto flow = module_.LoadApprovedFlow(name);
  if (!flow) return flow.error();
  // The old version finishes what it runs; it starts nothing new.
  if (it != loaded_.end()) (void)module_.RemoveFlow(it->second);
  loaded_[name] = *flow;
  return *flow;
}

}  // namespace basal::serve
