// Copies the WAL back into the database (PASSIVE checkpoints) on its own thread and its own
// connection. SQLite's automatic checkpoint runs inside the commit that crosses the threshold and
// fsyncs even under synchronous=NORMAL: 29-207 ms commits. A passive checkpoint takes no write
// lock, so the owner keeps committing while it runs; durability is unchanged (a commit is in the
// WAL before it returns, whoever copies it later). Started on first use: readers never get one.
//
//   sqlite3_wal_hook(db, &OnWalCommit, checkpointer);   // replaces SQLite's automatic checkpoint
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace basal::sqlite {

class Checkpointer {
 public:
  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  ~Checkpointer();  // joins the thread and closes its connection
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // SQLite's WAL hook (`arg` is a Checkpointer*, or null when SQLite has no threads): runs on the
  // owner's thread after every commit, with the WAL's size in pages. Background passes copy the
  // bulk while commits go on; once a pass leaves only a short tail, one inline checkpoint copies
  // the tail, everything is then copied and the next batch starts the WAL over.
  static int OnWalCommit(void* arg, sqlite3* db, const char* schema, int wal_pages);

 private:
  void Request();  // starts one pass (and the thread, the first time); only when !running()
  void Run();

  const std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stop_ = false;
  std::atomic<bool> running_{false}, failed_{false};
  std::atomic<int> backfilled_{-1};  // frames the last pass had copied; -1 before the first ends
  std::thread thread_;
};

}  // namespace basal::sqlite
