// Shared set-up for integration tests: a temporary journal and a module over real workers, and
// helpers to run a program to its end and to find a process's children.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "basal/module.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::testing {

inline std::string MakeTempDir() {
  std::string t = (std::filesystem::temp_directory_path() / "basal-test-XXXXXX").string();
  if (!mkdtemp(t.data())) std::abort();
  return t;
}

inline void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct Ended {
  int status = 0;
  std::string err;
};

// Starts `argv` with stdin and stdout on /dev/null and stderr on a pipe; returns its wait status
// and what it wrote on stderr. `in_child` runs in the child before the exec (e.g. to drop root).
inline Ended RunToEnd(const std::vector<std::string>& args, const std::function<void()>& in_child = {}) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2: " << std::strerror(errno);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(err[1], 2);
    if (in_child) in_child();
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(err[1]);
  Ended e;
  char buf[4096];
  ssize_t n;
  while ((n = read(err[0], buf, sizeof buf)) > 0) e.err.append(buf, static_cast<size_t>(n));
  close(err[0]);
  waitpid(pid, &e.status, 0);
  return e;
}

inline bool ExitedWith(const Ended& e, int code) { return WIFEXITED(e.status) && WEXITSTATUS(e.status) == code; }

// The pids whose parent is `parent`: /proc/<parent>/task/*/children where the kernel has it
// (CONFIG_PROC_CHILDREN), else every /proc/<pid>/stat's ppid.
inline std::set<pid_t> ChildrenOf(pid_t parent) {
  std::set<pid_t> children;
  bool have_children_files = false;
  const std::string tasks = "/proc/" + std::to_string(parent) + "/task";
  if (DIR* d = opendir(tasks.c_str())) {
    while (dirent* t = readdir(d)) {
      if (t->d_name[0] == '.') continue;
      std::ifstream f(tasks + "/" + t->d_name + "/children");
      if (!f) continue;
      have_children_files = true;
      pid_t pid;
      while (f >> pid) children.insert(pid);
    }
    closedir(d);
  }
  if (have_children_files) return children;
  if (DIR* d = opendir("/proc")) {
    while (dirent* p = readdir(d)) {
      if (p->d_name[0] < '1' || p->d_name[0] > '9') continue;
      std::ifstream f(std::string("/proc/") + p->d_name + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close_paren = stat.rfind(')');  // the command name may hold spaces and parens
      if (close_paren == std::string::npos) continue;
      std::istringstream rest(stat.substr(close_paren + 1));
      char state;
      pid_t ppid = 0;
      if (rest >> state >> ppid && ppid == parent) children.insert(static_cast<pid_t>(std::stol(p->d_name)));
    }
    closedir(d);
  }
  return children;
}

// What `basal <args>` did: its exit code (-1 if a signal ended it), stdout and stderr.
struct BasalRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `basal <args>` through sh (for quoting), its stderr kept in DIR/stderr.txt. `before` goes in
// front of the command (environment assignments, "cd X &&"), `after` behind it (a redirection).
inline BasalRun RunBasal(const std::string& dir, const std::string& args, const std::string& before = "",
                         const std::string& after = "") {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd = before + std::string(BASAL_CLI_PATH) + " " + args + after + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  BasalRun r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

class ModuleFixture : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override {
    module_.reset();
    std::filesystem::remove_all(dir_);
  }
  Module& Open(ModuleOptions o = {}) {
    o.journal_path = dir_ + "/journal.db";
    if (o.worker_path.empty()) o.worker_path = BASAL_WORKER_PATH;
    auto m = Module::Open(std::move(o));
    if (!m) ADD_FAILURE() << m.error().message;
    module_ = std::move(*m);
    return *module_;
  }
  FlowRef Add(const std::string& source, const std::string& manifest = "{}", const std::string& name = "t.js") {
    auto f = module_->AddFlow(name, source, manifest);
    if (!f) ADD_FAILURE() << f.error().message;
    return f ? *f : nullptr;
  }
  // The fake worker, started under a name that tells it which fault to commit.
  std::string FakeWorker(const std::string& fault) {
    const std::string link = dir_ + "/fake-worker--" + fault;
    std::filesystem::create_symlink(BASAL_FAKE_WORKER_PATH, link);
    return link;
  }
  // What `basal journal` reads: a read-only view of the module's journal.
  std::unique_ptr<JournalReader> Reader() {
    auto j = OpenSqliteReader(dir_ + "/journal.db");
    if (!j) ADD_FAILURE() << j.error().message;
    return j ? std::move(*j) : nullptr;
  }
  // A second writer on the same file (for the kv store's contents).
  std::unique_ptr<Store> OpenStore() {
    auto s = OpenSqliteStore({dir_ + "/journal.db", Durability::kNormal});
    if (!s) ADD_FAILURE() << s.error().message;
    return s ? std::move(*s) : nullptr;
  }
  std::string dir_;
  std::unique_ptr<Module> module_;
};

}  // namespace basal::testing
