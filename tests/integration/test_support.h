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
  FlowId Add(const std::string& source, const std::string& manifest = "{}", const std::string& name = "t.js") {
    auto f = module_->AddFlow(name, source, manifest);
    if (!f) ADD_FAILURE() << f.error().message;
    return f ? *f : 0;
  }
  std::unique_ptr<Journal> Reader() {
    auto j = Journal::Open(dir_ + "/journal.db", Durability::kNormal);
    if (!j) ADD_FAILURE() << j.error().message;
    return std::move(*j);
  }
  std::string dir_;
  std::unique_ptr<Module> module_;
};

}  // namespace basal::testing
