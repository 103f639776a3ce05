// Shared set-up for integration tests: a temporary journal and a module over real workers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "basal/module.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::testing {

inline std::string MakeTempDir() {
  std::string t = (std::filesystem::temp_directory_path() / "basal-test-XXXXXX").string();
  if (!mkdtemp(t.data())) std::abort();
  return t;
}

inline void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

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
