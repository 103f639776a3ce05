// SecretStore: owner-only files in an owner-only directory (secret_store.h).
#include "parent/secrets/secret_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

namespace basal {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

bool NameStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool NameRest(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }
bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxSecretNameBytes || !NameStart(name[0])) return false;
  return std::all_of(name.begin(), name.end(), NameRest);
}

constexpr const char* kNameRule = "a secret's name is a letter or _, then letters, digits or _, at most 64 bytes";

const char* FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Owner-only, as ssh wants ~/.ssh: owned by the effective uid, no permission for group or others.
// `what` names the thing ("secrets directory", "secret file"); `chmod` is the mode that repairs it.
Result<void> CheckOwnerOnly(const struct stat& st, const std::string& path, const char* what, const char* chmod) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    return MakeError(ErrorCode::kRefused, std::string(what) + " " + path + " is owned by uid " +
                                              std::to_string(st.st_uid) + ", not by this user (uid " +
                                              std::to_string(me) + "); secrets must belong to the user that runs "
                                              "basal: chown it to this user, or use a secrets directory of its own");
  if ((st.st_mode & 077) != 0)
    return MakeError(ErrorCode::kRefused, std::string(what) + " " + path + " has mode " + Octal(st.st_mode) +
                                              ": group or others may access it; secrets must be owner-only: run "
                                              "chmod " + chmod + " " + path);
  return Ok();
}

// A name for Set's temporary file: unique across threads and processes, and starting with '.',
// which no secret's name can, so List and Get never take it for a secret.
std::string TempName(std::string_view name) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 random{std::random_device{}()};
  return ".tmp-" + std::string(name) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(random());
}

Result<void> WriteAll(int fd, std::string_view data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return MakeError(ErrorCode::kIo, n < 0 ? Errno(errno) : std::string("short write"));
    off += static_cast<size_t>(n);
  }
  return Ok();
}

}  // namespace

Result<void> ValidateSecretName(std::string_view name) {
  if (name.empty()) return MakeError(ErrorCode::kInvalidArgument, std::string("the secret's name is empty; ") + kNameRule);
  const std::string shown(name.substr(0, kMaxSecretNameBytes));
  if (name.size() > kMaxSecretNameBytes)
    return MakeError(ErrorCode::kInvalidArgument, "secret name \"" + shown + "...\" is " + std::to_string(name.size()) +
                                                      " bytes; " + kNameRule);
  if (!NameStart(name[0]))
    return MakeError(ErrorCode::kInvalidArgument,
                     "secret name \"" + shown + "\" starts with '" + std::string(1, name[0]) + "'; " + kNameRule);
  for (size_t i = 1; i < name.size(); ++i) {
    if (!NameRest(name[i]))
      return MakeError(ErrorCode::kInvalidArgument, "secret name \"" + shown + "\" has '" + std::string(1, name[i]) +
                                                        "' at byte " + std::to_string(i + 1) + "; " + kNameRule);
  }
  return Ok();
}

Result<void> ValidateSecretValue(std::string_view name, std::string_view value) {
  const std::string who = "secret " + std::string(name.substr(0, kMaxSecretNameBytes)) + ": ";
  if (value.empty())
    return MakeError(ErrorCode::kInvalidArgument, who + "the value is empty; a value is 1 to " +
                                                      std::to_string(kMaxSecretValueBytes) + " bytes");
  if (value.size() > kMaxSecretValueBytes)
    return MakeError(ErrorCode::kInvalidArgument, who + "the value is " + std::to_string(value.size()) +
                                                      " bytes; the limit is " + std::to_string(kMaxSecretValueBytes));
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    if (c == '\t') continue;
    std::string kind;
    if (c == '\n') {
      kind = "a line feed (LF)";
    } else if (c == '\r') {
      kind = "a carriage return (CR)";
    } else if (c == 0) {
      kind = "a NUL byte";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      kind = std::string("the control character ") + hex;
    }
    // The offset and the kind of byte, never the value itself: this message may be printed.
    return MakeError(ErrorCode::kInvalidArgument,
                     who + "the value has " + kind + " at byte " + std::to_string(i + 1) + " of " +
                         std::to_string(value.size()) +
                         "; values go into HTTP headers, where CR or LF would start a header of the value's own, so "
                         "no control character but TAB is allowed (store one line, without its line ending)");
  }
  return Ok();
}

std::string SecretsDirForJournal(const std::string& journal_path) {
  const size_t slash = journal_path.rfind('/');
  if (slash == std::string::npos) return "secrets";
  return journal_path.substr(0, slash + 1) + "secrets";
}

Result<SecretStore> SecretStore::Open(std::string dir, bool create) {
  if (dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "the secrets directory's path is empty");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  bool created = false;
  if (create) {
    // Missing parents too, each 0700 (like the journal's directory); existing ones are left alone.
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos != dir.size() && dir[pos] != '/') continue;
      const std::string partial = dir.substr(0, pos);
      if (::mkdir(partial.c_str(), 0700) == 0) {
        created = pos == dir.size();
      } else if (errno != EEXIST) {
        return MakeError(ErrorCode::kIo, "cannot create the secrets directory " + partial + ": " + Errno(errno) +
                                             " (pass --secrets DIR to keep secrets elsewhere)");
      }
    }
  }
  // O_NOFOLLOW: a symbolic link in DIR's place is refused (ELOOP), never followed.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return MakeError(ErrorCode::kNotFound, "no secrets directory " + dir +
                                                 ": no secret is stored there yet (basal secret set NAME stores one)");
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::lstat(dir.c_str(), &st) == 0)
      return MakeError(ErrorCode::kRefused, "secrets directory " + dir + " is " + FileTypeName(st.st_mode) +
                                                "; it must be a real directory owned by this user, mode 0700 "
                                                "(replace it with one: mkdir -m 700 " + dir + ")");
    return MakeError(ErrorCode::kIo, "cannot open the secrets directory " + dir + ": " + Errno(err));
  }
  SecretStore store(std::move(dir), fd);
  // A directory this call made gets exactly 0700, whatever the umask left of it.
  if (created) (void)::fchmod(fd, 0700);
  if (auto ok = store.CheckDir(); !ok) return ok.error();
  return store;
}

SecretStore::SecretStore(SecretStore&& other) noexcept
    : dir_(std::move(other.dir_)), dir_fd_(std::exchange(other.dir_fd_, -1)) {}

SecretStore& SecretStore::operator=(SecretStore&& other) noexcept {
  if (this != &other) {
    if (dir_fd_ >= 0) ::close(dir_fd_);
    dir_ = std::move(other.dir_);
    dir_fd_ = std::exchange(other.dir_fd_, -1);
  }
  return *this;
}

SecretStore::~SecretStore() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string SecretStore::PathOf(std::string_view name) const { return dir_ + "/" + std::string(name); }

// Checked at every operation, not only at Open: an operator who loosens the mode later (chmod
// 755) is told so at the next use, as ssh tells it at every connection.
Result<void> SecretStore::CheckDir() const {
  struct stat st {};
  if (::fstat(dir_fd_, &st) != 0)
    return MakeError(ErrorCode::kIo, "cannot stat the secrets directory " + dir_ + ": " + Errno(errno));
  return CheckOwnerOnly(st, dir_, "secrets directory", "700");
}

Result<void> SecretStore::Set(std::string_view name, std::string_view value) {
  if (auto ok = ValidateSecretName(name); !ok) return ok;
  if (auto ok = ValidateSecretValue(name, value); !ok) return ok;
  if (auto ok = CheckDir(); !ok) return ok;
  const std::string tmp = TempName(name);
  auto failed = [&](const char* step, int err) {
    return MakeError(ErrorCode::kIo, "cannot store secret " + std::string(name) + " in " + dir_ + ": " + step + ": " +
                                         Errno(err));
  };
  const int fd = ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return failed("create a temporary file", errno);
  auto discard = [&](const char* step, int err) {
    ::close(fd);
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    return failed(step, err);
  };
  if (::fchmod(fd, 0600) != 0) return discard("chmod", errno);  // whatever the umask left
  if (auto wrote = WriteAll(fd, value); !wrote) {
    ::close(fd);
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    return MakeError(ErrorCode::kIo, "cannot store secret " + std::string(name) + " in " + dir_ +
                                         ": write: " + wrote.error().message);
  }
  // The data reaches the disk before the name does: after a crash the secret is the old value or
  // the new one, never an empty file.
  if (::fsync(fd) != 0) return discard("fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    return failed("close", err);
  }
  if (::renameat(dir_fd_, tmp.c_str(), dir_fd_, std::string(name).c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    if (err == EISDIR)
      return MakeError(ErrorCode::kRefused, "secret file " + PathOf(name) +
                                                " is a directory; remove it (a secret is a regular file, mode 0600)");
    return failed("rename", err);
  }
  if (::fsync(dir_fd_) != 0) return failed("fsync the directory", errno);
  return Ok();
}

Result<std::string> SecretStore::Get(std::string_view name) const {
  if (auto ok = ValidateSecretName(name); !ok) return ok.error();
  if (auto ok = CheckDir(); !ok) return ok.error();
  const std::string path = PathOf(name);
  // O_NOFOLLOW refuses a link; O_NONBLOCK keeps a FIFO put there from blocking the open (it is
  // then refused as not a regular file).
  const int fd = ::openat(dir_fd_, std::string(name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return MakeError(ErrorCode::kNotFound, "secret " + std::string(name) + " is not stored in " + dir_ +
                                                 "; store it with: basal secret set " + std::string(name));
    if (err == ELOOP)
      return MakeError(ErrorCode::kRefused, "secret file " + path +
                                                " is a symbolic link; a secret is a regular file owned by this user, "
                                                "mode 0600 (store it again with basal secret set " +
                                                std::string(name) + ")");
    return MakeError(ErrorCode::kIo, "cannot read secret file " + path + ": " + Errno(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return MakeError(ErrorCode::kIo, "cannot stat secret file " + path + ": " + Errno(errno));
  if (!S_ISREG(st.st_mode))
    return MakeError(ErrorCode::kRefused, "secret file " + path + " is " + FileTypeName(st.st_mode) +
                                              "; a secret is a regular file owned by this user, mode 0600");
  if (auto ok = CheckOwnerOnly(st, path, "secret file", "600"); !ok) return ok.error();
  // Bounded: a file larger than any value is refused by its size, unread.
  if (st.st_size > static_cast<off_t>(kMaxSecretValueBytes))
    return MakeError(ErrorCode::kInvalidArgument, "secret file " + path + " is " + std::to_string(st.st_size) +
                                                      " bytes; a value is at most " +
                                                      std::to_string(kMaxSecretValueBytes) +
                                                      " bytes (store it again with basal secret set " +
                                                      std::string(name) + ")");
  // One byte more than the limit is asked for, so a file that grew after fstat is still caught.
  std::string value(kMaxSecretValueBytes + 1, '\0');
  size_t got = 0;
  while (got < value.size()) {
    const ssize_t n = ::read(fd, value.data() + got, value.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeError(ErrorCode::kIo, "cannot read secret file " + path + ": " + Errno(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  value.resize(got);
  if (auto ok = ValidateSecretValue(name, value); !ok)
    return MakeError(ErrorCode::kInvalidArgument,
                     "secret file " + path + " holds no valid value: " + ok.error().message);
  return value;
}

Result<std::vector<std::string>> SecretStore::List() const {
  if (auto ok = CheckDir(); !ok) return ok.error();
  // A descriptor of our own for the directory stream (closedir closes it); DIR's path is not
  // opened again, so the listing is of the directory Open checked.
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return MakeError(ErrorCode::kIo, "cannot list the secrets directory " + dir_ + ": " + Errno(errno));
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return MakeError(ErrorCode::kIo, "cannot list the secrets directory " + dir_ + ": " + Errno(err));
  }
  std::vector<std::string> names;
  Result<void> bad = Ok();
  int read_errno = 0;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      read_errno = errno;
      break;
    }
    const std::string_view name = entry->d_name;
    if (!IsValidName(name)) continue;  // ".", "..", Set's temporary files, strangers
    struct stat st {};
    if (::fstatat(dir_fd_, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      bad = MakeError(ErrorCode::kIo, "cannot stat secret file " + PathOf(name) + ": " + Errno(errno));
      break;
    }
    if (!S_ISREG(st.st_mode)) {
      bad = MakeError(ErrorCode::kRefused, "secret file " + PathOf(name) + " is " + FileTypeName(st.st_mode) +
                                               "; a secret is a regular file owned by this user, mode 0600 (remove "
                                               "it, then store the secret again with basal secret set NAME)");
      break;
    }
    if (auto ok = CheckOwnerOnly(st, PathOf(name), "secret file", "600"); !ok) {
      bad = ok;
      break;
    }
    names.emplace_back(name);
  }
  ::closedir(d);
  if (!bad) return bad.error();
  if (read_errno != 0)
    return MakeError(ErrorCode::kIo, "cannot list the secrets directory " + dir_ + ": " + Errno(read_errno));
  std::sort(names.begin(), names.end());
  return names;
}

Result<void> SecretStore::Remove(std::string_view name) {
  if (auto ok = ValidateSecretName(name); !ok) return ok;
  if (auto ok = CheckDir(); !ok) return ok;
  if (::unlinkat(dir_fd_, std::string(name).c_str(), 0) != 0) {
    const int err = errno;
    if (err == ENOENT)
      return MakeError(ErrorCode::kNotFound, "secret " + std::string(name) + " is not stored in " + dir_ +
                                                 " (basal secret list shows the stored names)");
    return MakeError(ErrorCode::kIo, "cannot remove secret file " + PathOf(name) + ": " + Errno(err));
  }
  if (::fsync(dir_fd_) != 0)
    return MakeError(ErrorCode::kIo, "removed secret " + std::string(name) + ", but fsync of " + dir_ +
                                         " failed: " + Errno(errno));
  return Ok();
}

}  // namespace basal
