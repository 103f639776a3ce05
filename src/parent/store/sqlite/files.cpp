// Owner-only journal files and directories (see sqlite_store.h and files.h).
#include "parent/store/sqlite/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "parent/store/sqlite/sqlite_store.h"

namespace basal {

Result<void> EnsurePrivateDirectory(const std::string& dir) {
  if (dir.empty()) return Ok();
  size_t pos = 0;
  while (pos <= dir.size()) {
    const size_t slash = dir.find('/', pos);
    const size_t end = slash == std::string::npos ? dir.size() : slash;
    const std::string partial = dir.substr(0, end);
    pos = end + 1;
    if (!partial.empty() && ::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return MakeError(ErrorCode::kIo, "cannot create directory " + partial + ": " + std::strerror(errno) +
                                           " (pass --db FILE to put the journal elsewhere)");
    }
    if (slash == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return MakeError(ErrorCode::kIo, dir + " is not a directory (pass --db FILE to put the journal elsewhere)");
  return Ok();
}

namespace sqlite {

// The file gets its final name only after its descriptor is closed (a private temporary name,
// then link(2), which never replaces an existing file): closing a descriptor drops every POSIX
// lock this process holds on the file, and a connection of this process that opened the journal
// meanwhile would silently lose its SQLite locks.
Result<void> CreatePrivateFileIfMissing(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return Ok();
  if (errno != ENOENT) return Ok();  // let SQLite report what is wrong with it
  std::random_device random;
  const std::string tmp = path + ".new-" + std::to_string(::getpid()) + "-" + std::to_string(random());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Ok();  // no directory: SQLite's open names it
    return MakeError(ErrorCode::kIo, "journal " + path + ": cannot create it: " + std::strerror(errno) +
                                         "; check that its directory is writable by this user");
  }
  (void)::fchmod(fd, 0600);  // whatever the umask
  ::close(fd);
  int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked == 0 || link_errno == EEXIST) return Ok();
  // A file system without hard links: create it in place (the descriptor is closed before
  // SQLite can have opened a file that did not exist a moment ago).
  const int direct = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (direct < 0) {
    if (errno == EEXIST) return Ok();
    return MakeError(ErrorCode::kIo, "journal " + path + ": cannot create it: " + std::strerror(errno) +
                                         "; check that its directory is writable by this user");
  }
  (void)::fchmod(direct, 0600);
  ::close(direct);
  return Ok();
}

}  // namespace sqlite
}  // namespace basal
