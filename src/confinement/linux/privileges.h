// no_new_privs and non-dumpable: step 3 of the worker's confinement. no_new_privs means no exec
// can ever raise the worker's privileges (and lets an unprivileged worker install Landlock and
// seccomp); non-dumpable means no other process, its parent included, can ptrace the worker or
// read its memory through /proc. Each setting is read back, not assumed.
// The parent death signal, set before step 0, is here too: it is one more prctl read back.
#pragma once

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// prctl(PR_SET_PDEATHSIG, SIGKILL), then PR_GET_PDEATHSIG must answer SIGKILL. The kernel sends it
// when the thread that started the worker ends (the parent's loop thread: a parent that spawns
// workers from a thread that ends before the process would kill them with it).
StepStatus SetParentDeathSignal();
// prctl(PR_SET_NO_NEW_PRIVS, 1), then PR_GET_NO_NEW_PRIVS must answer 1.
StepStatus SetNoNewPrivs();
// prctl(PR_SET_DUMPABLE, 0), then PR_GET_DUMPABLE must answer 0.
StepStatus MakeNonDumpable();

}  // namespace basal::confinement
