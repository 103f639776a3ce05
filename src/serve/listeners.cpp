// The daemon's listening sockets (listeners.h).
#include "serve/listeners.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace basal::serve {

namespace {

// The kernel's queue of connections not yet accepted: as long as it allows (net.core.somaxconn).
// At 128, a burst of connects (the soak's 192 slow senders at once) had SYNs dropped, and an
// honest client's connect waited for its 1 s retransmission; accepted connections are bounded
// by the listener's max_connections, not by this.
constexpr int kListenBacklog = SOMAXCONN;

std::optional<int64_t> ParseUnsignedId(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsLoopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
  }
  return false;
}

// "127.0.0.1:8470" or "[::1]:8470".
Result<sockaddr_storage> ParseHostPort(const std::string& text, socklen_t* len) {
  sockaddr_storage ss{};
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": write [ADDRESS]:PORT for IPv6");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos)
      return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": write ADDRESS:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto p = ParseUnsignedId(port);
  if (!p || *p < 1 || *p > 65535)
    return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": the port must be 1-65535");
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(*p));
    *len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(*p));
    *len = sizeof(sockaddr_in6);
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     "listen.tcp \"" + text + "\": \"" + host + "\" is not an IP address (names are not resolved)");
  }
  return ss;
}

}  // namespace

Result<std::vector<gid_t>> ResolveGroups(const std::vector<std::string>& names) {
  std::vector<gid_t> out;
  for (const std::string& g : names) {
    group* gr = getgrnam(g.c_str());
    if (!gr) return MakeError(ErrorCode::kInvalidArgument, "listen.allowed_groups: no group named " + g + " on this system");
    out.push_back(gr->gr_gid);
  }
  return out;
}

Result<int> ListenTcp(const ListenConfig& listen) {
  socklen_t len = 0;
  auto addr = ParseHostPort(listen.tcp, &len);
  if (!addr) return addr.error();
  if (!IsLoopback(*addr) && !listen.allow_non_loopback)
    return MakeError(ErrorCode::kRefused, "listen.tcp " + listen.tcp +
                                              " is not a loopback address; basal serve binds only loopback unless "
                                              "the config says \"allow_non_loopback\": true (put a TLS proxy in front)");
  const int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return MakeError(ErrorCode::kIo, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), len) != 0 || ::listen(fd, kListenBacklog) != 0) {
    const int e = errno;
    close(fd);
    return MakeError(ErrorCode::kIo, "cannot listen on " + listen.tcp + ": " + std::strerror(e));
  }
  return fd;
}

Result<int> ListenUnix(const std::string& path, const std::vector<gid_t>& groups) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path)
    return MakeError(ErrorCode::kInvalidArgument, "socket path \"" + path + "\" is empty or longer than " +
                                                      std::to_string(sizeof sa.sun_path - 1) + " bytes");
  std::memcpy(sa.sun_path, path.data(), path.size());
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 && mkdir(dir.c_str(), 0700) != 0)
      return MakeError(ErrorCode::kIo, "cannot create the socket's directory " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return MakeError(ErrorCode::kIo, path + " exists and is not a socket; remove it or choose another --socket");
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (live)
      return MakeError(ErrorCode::kConflict, "another process serves " + path + " (a basal serve already runs there?)");
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return MakeError(ErrorCode::kIo, std::string("socket: ") + std::strerror(errno));
  const mode_t old = umask(0177);  // born 0600: no window where others may connect
  const int b = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  umask(old);
  if (b != 0 || ::listen(fd, kListenBacklog) != 0) {
    const int e = errno;
    close(fd);
    return MakeError(ErrorCode::kIo, "cannot listen on " + path + ": " + std::strerror(e));
  }
  if (!groups.empty()) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), groups[0]) != 0 || chmod(path.c_str(), 0660) != 0) {
      const int e = errno;
      close(fd);
      return MakeError(ErrorCode::kIo, "cannot give " + path + " to its allowed group: " + std::strerror(e));
    }
  }
  return fd;
}

}  // namespace basal::serve
