#include "parent/platform/linux/proc_status.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>

namespace basal {
namespace {

constexpr const char* kRequired[] = {"State",  "Uid",    "Gid",    "Groups",     "CapInh", "CapPrm",
                                     "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"};
constexpr const char* kOptional[] = {"Seccomp_filters"};

Error Bad(std::string_view field, std::string_view value, std::string_view want) {
  return MakeError(ErrorCode::kInvalidArgument, "/proc status field " + std::string(field) + ": \"" +
                                                    std::string(value) + "\" is not " + std::string(want));
}

// The tokens of a value split on blanks (the kernel separates with tabs, Groups with spaces).
std::vector<std::string_view> Tokens(std::string_view v) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < v.size()) {
    while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
    const size_t start = i;
    while (i < v.size() && v[i] != ' ' && v[i] != '\t') ++i;
    if (i > start) out.push_back(v.substr(start, i - start));
  }
  return out;
}

// Decimal digits only (no sign, no space), no overflow of T.
template <typename T>
bool Decimal(std::string_view s, T& out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Exactly 16 hexadecimal digits, as the kernel prints a capability set.
bool CapabilityMask(std::string_view s, uint64_t& out) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && ptr == s.data() + s.size();
}

Result<std::array<uint32_t, 4>> FourIds(std::string_view field, std::string_view value) {
  const auto t = Tokens(value);
  std::array<uint32_t, 4> ids{};
  if (t.size() != 4) return Bad(field, value, "four ids (real, effective, saved, filesystem)");
  for (size_t i = 0; i < 4; ++i)
    if (!Decimal(t[i], ids[i])) return Bad(field, value, "four decimal ids");
  return ids;
}

}  // namespace

Result<ProcStatus> ParseProcStatus(std::string_view text) {
  std::map<std::string, std::string_view, std::less<>> fields;
  ProcStatus st;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == '\t' || value.front() == ' ')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\t' || value.back() == ' ')) value.remove_suffix(1);
    bool wanted = false;
    for (const char* k : kRequired) wanted = wanted || key == k;
    for (const char* k : kOptional) wanted = wanted || key == k;
    if (!wanted) continue;
    if (!fields.emplace(std::string(key), value).second)
      return MakeError(ErrorCode::kInvalidArgument, "/proc status field " + std::string(key) + " appears twice");
    st.shown.emplace_back(std::string(key), std::string(value));
  }
  for (const char* k : kRequired)
    if (!fields.count(k))
      return MakeError(ErrorCode::kInvalidArgument, std::string("/proc status has no ") + k + ": line");

  const std::string_view state = fields.find("State")->second;
  if (state.empty() || !((state[0] >= 'A' && state[0] <= 'Z') || (state[0] >= 'a' && state[0] <= 'z'))) return Bad("State", state, "a state letter");
  st.state = state[0];

  auto uid = FourIds("Uid", fields.find("Uid")->second);
  if (!uid) return uid.error();
  st.uid = *uid;
  auto gid = FourIds("Gid", fields.find("Gid")->second);
  if (!gid) return gid.error();
  st.gid = *gid;
  const std::string_view groups = fields.find("Groups")->second;
  for (std::string_view g : Tokens(groups)) {
    uint32_t id = 0;
    if (!Decimal(g, id)) return Bad("Groups", groups, "a list of decimal group ids");
    st.groups.push_back(id);
  }

  const std::pair<const char*, uint64_t*> caps[] = {{"CapInh", &st.cap_inh},
                                                     {"CapPrm", &st.cap_prm},
                                                     {"CapEff", &st.cap_eff},
                                                     {"CapBnd", &st.cap_bnd},
                                                     {"CapAmb", &st.cap_amb}};
  for (const auto& [key, out] : caps) {
    const std::string_view v = fields.find(key)->second;
    if (!CapabilityMask(v, *out)) return Bad(key, v, "a capability mask of 16 hexadecimal digits");
  }

  const std::string_view nnp = fields.find("NoNewPrivs")->second;
  if (nnp != "0" && nnp != "1") return Bad("NoNewPrivs", nnp, "0 or 1");
  st.no_new_privs = nnp == "1";
  const std::string_view seccomp = fields.find("Seccomp")->second;
  if (seccomp != "0" && seccomp != "1" && seccomp != "2") return Bad("Seccomp", seccomp, "0, 1 or 2");
  st.seccomp = seccomp[0] - '0';
  if (auto it = fields.find("Seccomp_filters"); it != fields.end()) {
    uint64_t n = 0;
    if (!Decimal(it->second, n)) return Bad("Seccomp_filters", it->second, "a decimal count");
    st.seccomp_filters = n;
  }
  return st;
}

Result<ProcLimits> ParseProcLimits(std::string_view text) {
  struct Line {
    std::string_view key;
    std::string_view unit;
    ProcLimit* out;
    bool seen = false;
  };
  ProcLimits limits;
  Line lines[] = {{"Max cpu time", "seconds", &limits.cpu_seconds}, {"Max address space", "bytes", &limits.address_space_bytes}};
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    for (Line& l : lines) {
      if (line.substr(0, l.key.size()) != l.key || line.size() == l.key.size() || line[l.key.size()] != ' ') continue;
      const std::string_view rest = line.substr(l.key.size());
      if (l.seen) return MakeError(ErrorCode::kInvalidArgument, "/proc limits line " + std::string(l.key) + " appears twice");
      l.seen = true;
      const auto t = Tokens(rest);
      std::string shown;
      for (std::string_view tok : t) shown += (shown.empty() ? "" : " ") + std::string(tok);
      const Error bad = MakeError(ErrorCode::kInvalidArgument, "/proc limits line " + std::string(l.key) + ": \"" + shown +
                                                                   "\" is not a soft and a hard limit in " + std::string(l.unit));
      if (t.size() != 3 || t[2] != l.unit) return bad;
      std::optional<uint64_t>* out[2] = {&l.out->soft, &l.out->hard};
      for (int i = 0; i < 2; ++i) {
        if (t[i] == "unlimited") continue;
        uint64_t v = 0;
        if (!Decimal(t[i], v)) return bad;
        *out[i] = v;
      }
    }
  }
  for (const Line& l : lines)
    if (!l.seen) return MakeError(ErrorCode::kInvalidArgument, "/proc limits has no " + std::string(l.key) + " line");
  return limits;
}

namespace {

Result<std::string> ReadProcFile(pid_t pid, const char* name) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return MakeError(ErrorCode::kIo, "open " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return MakeError(ErrorCode::kIo, "read " + path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break;  // a few KiB; never read without end
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<std::string> ReadProcStatus(pid_t pid) { return ReadProcFile(pid, "status"); }
Result<std::string> ReadProcLimits(pid_t pid) { return ReadProcFile(pid, "limits"); }

}  // namespace basal
