// The seccomp allowlist of the confined worker: the types of its ONE table. The table itself,
// with every row's argument rule and the sentence that admits it, is in seccomp_policy.cpp;
// reviewing the Linux sandbox means reading that file. seccomp_filter.h compiles it.
//
// A row admits one system call, either with any arguments or only when each checked argument
// equals one of a few values. Every comparison is of all 64 bits, by value (never a single bit:
// MAP_SHARED_VALIDATE contains MAP_PRIVATE's bit), so garbage in an argument's upper 32 bits is
// a refusal. Everything not admitted, and every admitted call with a refused argument, kills the
// process (SECCOMP_RET_KILL_PROCESS).
//
//   for (const AdmittedSyscall& row : AdmittedSyscalls()) std::cout << row.name << ": " << row.reason;
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace basal::confinement {

enum class SyscallFamily : uint8_t { kChannelIo, kMemory, kTime, kRandom, kFutex, kSignals, kExit };
const char* SyscallFamilyName(SyscallFamily family);  // "channel I/O", "memory", ...

// A value an argument must equal: a literal, or a value of the worker's own baked into the
// filter when it is installed (its pid and the tid of its one thread).
struct ArgValue {
  enum class Source : uint8_t { kLiteral, kOwnPid, kOwnTid };
  constexpr ArgValue(uint64_t v) : source(Source::kLiteral), literal(v) {}  // NOLINT(google-explicit-constructor)
  constexpr ArgValue(Source s, uint64_t v) : source(s), literal(v) {}
  Source source;
  uint64_t literal;
};
inline constexpr ArgValue kOwnPid{ArgValue::Source::kOwnPid, 0};
inline constexpr ArgValue kOwnTid{ArgValue::Source::kOwnTid, 0};

// Argument `index` (0-5) must equal one of `values`.
struct ArgOneOf {
  static constexpr size_t kMaxValues = 8;
  constexpr ArgOneOf() = default;
  constexpr ArgOneOf(uint8_t arg_index, std::initializer_list<ArgValue> vs) : index(arg_index) {
    for (const ArgValue& v : vs) values[count++] = v;
  }
  uint8_t index = 0;
  uint8_t count = 0;
  std::array<ArgValue, kMaxValues> values{ArgValue(0), ArgValue(0), ArgValue(0), ArgValue(0),
                                          ArgValue(0), ArgValue(0), ArgValue(0), ArgValue(0)};
};

// An argument rule named by its effect: every listed argument must match (AND), each against
// its own set of values (OR). No argument listed means any arguments are admitted.
struct ArgRule {
  static constexpr size_t kMaxArgs = 3;
  constexpr ArgRule(std::string_view rule_name, std::string_view rule_effect, std::initializer_list<ArgOneOf> as)
      : name(rule_name), effect(rule_effect) {
    for (const ArgOneOf& a : as) args[count++] = a;
  }
  std::string_view name;    // e.g. "OnlyFd(0)", "ProtWithoutExec"
  std::string_view effect;  // one sentence: what the rule lets through
  uint8_t count = 0;
  std::array<ArgOneOf, kMaxArgs> args{};
};

struct AdmittedSyscall {
  int nr;                 // x86_64 system call number
  std::string_view name;  // as in strace and libseccomp
  ArgRule rule;
  SyscallFamily family;
  std::string_view reason;  // mandatory: why the worker needs it and why it is harmless
};

struct RefusedSyscall {
  int nr;
  std::string_view name;
  std::string_view why;  // what it would give a subverted engine
};

// The allowlist, in the table's order.
std::span<const AdmittedSyscall> AdmittedSyscalls();
// System calls that must never be admitted; a unit test and a static_assert prove none is.
std::span<const RefusedSyscall> NeverAllowedSyscalls();

// The row admitting `nr`, or nullptr.
const AdmittedSyscall* FindAdmitted(long nr);

// The name of an x86_64 system call number, for violation reports and docs: from the table,
// the never-allow list, or libseccomp's name table; "x32:<name>" for an x32 number (bit 30 set);
// "unknown" when nothing knows it. The pointer stays valid for the life of the process.
const char* SyscallName(long nr);

}  // namespace basal::confinement
