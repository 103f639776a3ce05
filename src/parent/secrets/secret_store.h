// SecretStore: the operator's secrets (API tokens and the like), one owner-only file per secret in
// one owner-only directory. A grant rule names a secret as `${secret:NAME}` and the parent puts its
// value into the matching request; the script, the worker and the journal never see the value.
// `basal secret set|list|rm` (src/cli/secret_command.cpp) is how an operator fills it.
//
//   auto store = SecretStore::Open(SecretsDirForJournal(journal_path), /*create=*/false);
//   if (!store) return store.error();
//   Result<std::string> token = store->Get("example_token");   // kNotFound: not stored
//
// Layout: DIR (mode 0700, owned by the effective uid) holds one regular file per secret, named
// as the secret, mode 0600, holding exactly the value. Owner-only is enforced as ssh enforces it
// for ~/.ssh: a directory or file that another user owns, that group or others may access, that
// is a symbolic link, or that is not a regular file (directory) is refused, with an error that
// names the path and the fix. Every operation checks again (the directory through the descriptor
// kept open since Open, so replacing DIR's path later changes nothing).
//
// Concurrency: Set writes a temporary file in DIR (name starting with '.', which no secret name
// can), fsyncs it, renames it over the secret's file and fsyncs DIR. A reader (Get, in the parent's
// loop thread) therefore sees the old value or the new one, never a part, even while another
// PROCESS (`basal secret set`) replaces it; Get, List, Set and Remove may also be called from
// several threads at once (nothing in the object changes after Open).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "basal/result.h"

namespace basal {

// A secret's name: [A-Za-z_][A-Za-z0-9_]{0,63}, the rule `${secret:NAME}` in a grant uses too.
inline constexpr size_t kMaxSecretNameBytes = 64;
// A secret's value: 1 to 8192 bytes; no control character but TAB (no NUL, CR, LF, DEL: values go
// into HTTP headers, where CR or LF would start a header of the value's choosing). Other bytes,
// UTF-8 or not, are kept as given.
inline constexpr size_t kMaxSecretValueBytes = 8192;

// Ok, or kInvalidArgument saying what is wrong with `name` (never more than its first 64 bytes,
// escaped by whoever prints it).
Result<void> ValidateSecretName(std::string_view name);
// Ok, or kInvalidArgument naming the secret `name` and what is wrong with the value: its length,
// or the first forbidden byte's kind and offset. The message never contains the value.
Result<void> ValidateSecretValue(std::string_view name, std::string_view value);

// The secrets directory that goes with a journal: `secrets` beside it
// ("/home/u/.local/state/basal/journal.db" -> "/home/u/.local/state/basal/secrets").
std::string SecretsDirForJournal(const std::string& journal_path);

class SecretStore {
 public:
  // Opens DIR. With `create`, a missing DIR is created with mode 0700 (and its missing parents
  // too, 0700); without it, a missing DIR is kNotFound. DIR must be a directory (not a link to
  // one), owned by the effective uid, with no group or other permission: else kRefused naming the
  // path and the fix (chmod 700 DIR).
  static Result<SecretStore> Open(std::string dir, bool create);

  SecretStore(SecretStore&& other) noexcept;
  SecretStore& operator=(SecretStore&& other) noexcept;
  SecretStore(const SecretStore&) = delete;
  SecretStore& operator=(const SecretStore&) = delete;
  ~SecretStore();

  // Stores (or atomically replaces) secret `name`. kInvalidArgument for a bad name or value.
  Result<void> Set(std::string_view name, std::string_view value);
  // The value of secret `name`. kNotFound (naming it and `basal secret set NAME`) when it is not
  // stored; kRefused for a file that is not a regular owner-only file; kInvalidArgument for a
  // file larger than kMaxSecretValueBytes (refused without reading it) or whose value breaks
  // the rules (a hand-written file with a newline, say).
  Result<std::string> Get(std::string_view name) const;
  // The names of the stored secrets, sorted; never a value. Entries whose names no secret can
  // have (Set's temporary files, anything else) are ignored; a secret's file that is not a
  // regular owner-only file is kRefused, as Get would refuse it.
  Result<std::vector<std::string>> List() const;
  // Removes secret `name`; kNotFound when it is not stored.
  Result<void> Remove(std::string_view name);

  const std::string& dir() const { return dir_; }

 private:
  SecretStore(std::string dir, int dir_fd) : dir_(std::move(dir)), dir_fd_(dir_fd) {}
  Result<void> CheckDir() const;
  std::string PathOf(std::string_view name) const;

  std::string dir_;
  int dir_fd_ = -1;  // O_DIRECTORY|O_NOFOLLOW descriptor of dir_, owned
};

}  // namespace basal
