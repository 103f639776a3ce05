// The Windows side of the platform seam (the sandbox design, Windows): WorkerLauncher for Windows,
// built only by the mingw-w64 cross build. Launch creates the GUI-subsystem worker suspended, in
// a job of its own, under a Less Privileged AppContainer (LPAC) primary token for the fixed
// profile cortexkit.basal.worker (zero capabilities, no privileges, the NULL SID as the only
// restricting SID, every access group deny-only, Low at birth), with a matching Low impersonation
// token on its initial thread, an environment of SystemRoot alone, only the three stdio pipes
// inherited (an explicit handle list) and the required mitigations. Before the worker runs a
// single instruction the launcher checks what it got: the suspended primary and thread tokens
// (confinement/windows/token_rules.h), the job's actual limits (job_limits.h) and the child's
// membership in that job. A failed step ends the child (its job is killed) and Launch returns the
// step and the reason: never a weaker sandbox. Then the worker finishes and attests its own
// startup (confinement/windows/confine.h) before its first read.
//
//   auto launcher = WorkerLauncher::ForThisPlatform();
//   auto worker = launcher->Launch({.path = L"ck-basal-worker.exe", .profile = WorkerProfile::kFlow,
//                                   .heap_budget_bytes = 64 << 20});
//   if (!worker) { report worker.error().message; }   // "worker launch refused: token: ..."
#pragma once

#include <string>

#include "basal/result.h"
#include "parent/platform/windows/job_limits.h"
#include "parent/platform/worker_launcher.h"

namespace basal {

// Every refusal's message starts with this, then "<step>: <reason>".
inline constexpr const char* kLaunchRefused = "worker launch refused: ";

// The folder Windows gives the cortexkit.basal.worker profile (GetAppContainerFolderPath), where a
// weaker token could create files; the probe suite checks the worker cannot.
Result<std::wstring> AppContainerFolder();

// The checks Launch makes of the suspended worker before it resumes it: its primary token (LPAC
// for `app_container_sid`, Low, ...), its initial thread's impersonation token (the same, an
// impersonation token), the job's actual limits (exactly `wanted`) and its membership in that job.
// HANDLEs: the process and thread with query rights, the job with JOB_OBJECT_QUERY.
Result<void> CheckSuspendedWorker(void* process, void* thread, void* job, const std::string& app_container_sid,
                                  const JobLimits& wanted);

// UTF-8 <-> UTF-16 for paths and messages.
std::wstring Widen(const std::string& utf8);
std::string Narrow(const std::wstring& utf16);

}  // namespace basal
