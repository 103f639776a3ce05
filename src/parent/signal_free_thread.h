// A std::thread that takes no signal: it starts with every signal blocked, set before the thread
// exists, so none reaches it in between. Signals are the loop thread's: `basal serve` blocks
// SIGTERM, SIGINT and SIGHUP there for its signalfd (serve/lifecycle.cpp), and a thread that left
// them at their default would take one and end the process instead (the pool's launch thread, the
// journal's checkpointer). The caller's own mask is unchanged afterwards. On Windows, a plain
// std::thread (no POSIX signals there).
#pragma once

#include <thread>
#include <utility>

#ifndef _WIN32
#include <pthread.h>
#include <signal.h>
#endif

namespace basal {

template <typename Body>
std::thread SignalFreeThread(Body&& body) {
#ifndef _WIN32
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  struct Restore {
    sigset_t* mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, mask, nullptr); }
  } restore{&before};
#endif
  return std::thread(std::forward<Body>(body));
}

}  // namespace basal
