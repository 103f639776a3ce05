// `basal __generate` and `basal __complete` (generate_command.h): reference.h's model of the
// command line, written out as man pages and completion scripts, or asked for candidates.
#include "cli/generate_command.h"

#include <sys/stat.h>

#include <cstdlib>
#include <memory>

#include "cli/cli_support.h"
#include "cli/reference.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::cli {
namespace {

constexpr const char* kHiddenCommandGroup = "";  // CLI11: a subcommand in the empty group is not listed

// The names completions offer, read from the store without creating or changing anything: a
// journal that is not there, or cannot be read, has no names.
class StoreNames : public NameSource {
 public:
  std::vector<std::string> Names(ValueKind kind, const std::string& db, const std::string& secrets_dir) override {
    std::vector<std::string> names;
    std::string journal = ExpandHome(db);
    if (journal.empty()) {
      auto location = DefaultJournalLocation();
      if (!location) return names;
      journal = *location;
    }
    if (kind == ValueKind::kSecret) {
      auto store = SecretStore::Open(secrets_dir.empty() ? SecretsDirFor(journal) : ExpandHome(secrets_dir),
                                     /*create=*/false);
      if (!store) return names;
      auto listed = store->List();
      return listed ? *listed : names;
    }
    struct stat st {};
    if (::stat(journal.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return names;
    auto reader = OpenSqliteReader(journal);
    if (!reader) return names;
    if (kind == ValueKind::kToken) {
      auto tokens = (*reader)->ListTokens();
      if (tokens)
        for (const TokenRow& t : *tokens)
          if (!t.revoked_unix_us) names.push_back(t.name);
      return names;
    }
    auto rows = (*reader)->Names(kind == ValueKind::kPolicy ? ApprovalKind::kPolicy : ApprovalKind::kFlow);
    if (rows)
      for (const ApprovalRow& row : *rows) names.push_back(row.name);
    return names;
  }

 private:
  // The shell leaves a typed "~/journal.db" as it is while completing.
  static std::string ExpandHome(const std::string& path) {
    const char* home = std::getenv("HOME");
    if (path.starts_with("~/") && home != nullptr && home[0] == '/') return home + path.substr(1);
    return path;
  }
};

Result<void> WriteManPages(const CLI::App& app, const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return MakeError(ErrorCode::kNotFound, "--out " + dir + ": not a directory (create it first)");
  const std::string version = BASAL_VERSION;
  for (const ManPage& page : ManPages(DescribeCommand(app), version)) {
    if (auto ok = WriteFile(dir + "/" + page.file_name, page.text, "man page"); !ok) return ok.error();
  }
  return Ok();
}

}  // namespace

void AddGenerate(CLI::App& app, int& exit_code) {
  struct Options {
    std::string what;
    std::string out_dir = ".";
  };
  auto o = std::make_shared<Options>();
  CLI::App* c = app.add_subcommand("__generate", "Write basal's man pages, or a shell's completion script");
  c->group(kHiddenCommandGroup);
  c->add_option("what", o->what, "man (pages into --out DIR), bash, zsh or fish (a script on stdout)")
      ->required()
      ->check(CLI::IsMember({"man", "bash", "zsh", "fish"}));
  c->add_option("--out", o->out_dir, "Where the man pages go (default: the current directory)")->type_name("DIR");
  c->callback([&app, o, &exit_code] {
    if (o->what == "man") {
      auto ok = WriteManPages(app, o->out_dir);
      exit_code = ok ? kExitOk : Fail(kKindIo, ok.error().message);
      return;
    }
    WriteStdout(CompletionScript(o->what));
    exit_code = kExitOk;
  });
}

int CompleteCommand(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args.front() != "--")
    return Fail(kKindUsage, "basal __complete -- WORD...: the words after basal, the last one being completed");
  StoreNames names;
  const std::vector<std::string> words(args.begin() + 1, args.end());
  WriteStdout(CompletionLines(Complete(DescribeCommand(app), words, names)));
  return kExitOk;
}

}  // namespace basal::cli
