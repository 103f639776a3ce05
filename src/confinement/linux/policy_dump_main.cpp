// basal-policy-dump: prints the worker's seccomp allowlist, rendered from the one table, so the
// docs and the golden file are generated rather than written by hand.
//
//   basal-policy-dump markdown            the table as Markdown (docs/syscall-admission.md)
//   basal-policy-dump pfc [--pid N]       the compiled filter as libseccomp pseudo-code, with N
//                                         (default 4242) baked in as the worker's pid and tid
//   basal-policy-dump bpf [--pid N]       the compiled filter, one instruction per line
//   basal-policy-dump update-doc FILE     re-renders the table between FILE's markers
//                                         (docs/syscall-admission.md)
//   basal-policy-dump program-cpp FILE    writes the worker's prebuilt seccomp program (with
//                                         placeholders for pid and tid) as C++ (the build runs it)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "confinement/linux/policy_render.h"
#include "confinement/linux/seccomp_filter.h"
#include "confinement/linux/seccomp_program.h"

namespace {

constexpr int kExitUsage = 64;

int Usage() {
  std::fputs("usage: basal-policy-dump markdown | pfc [--pid N] | bpf [--pid N] | update-doc FILE | program-cpp FILE\n",
             stderr);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using basal::confinement::SeccompFilter;
  if (argc < 2) return Usage();
  const std::string_view mode = argv[1];
  if (mode == "update-doc") {
    if (argc != 3) return Usage();
    std::string doc;
    {
      std::ifstream in(argv[2], std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "basal-policy-dump: cannot read %s\n", argv[2]);
        return 1;
      }
      std::ostringstream s;
      s << in.rdbuf();
      doc = s.str();
    }
    std::string error;
    if (!basal::confinement::ReplaceRenderedSection(doc, error)) {
      std::fprintf(stderr, "basal-policy-dump: %s: %s\n", argv[2], error.c_str());
      return 1;
    }
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out << doc;
    if (!out.flush()) {
      std::fprintf(stderr, "basal-policy-dump: cannot write %s\n", argv[2]);
      return 1;
    }
    return 0;
  }
  if (mode == "program-cpp") {
    if (argc != 3) return Usage();
    std::vector<sock_filter> program;
    std::string error;
    if (!basal::confinement::BuildPrebuiltProgram(program, error)) {
      std::fprintf(stderr, "basal-policy-dump: %s\n", error.c_str());
      return 1;
    }
    std::string text =
        "// Generated at build time by `basal-policy-dump program-cpp` from the table in\n"
        "// src/confinement/linux/seccomp_policy.cpp. Do not edit; see seccomp_program.h.\n"
        "#include \"confinement/linux/seccomp_program.h\"\n\n"
        "namespace basal::confinement {\nnamespace {\n\nconstexpr sock_filter kProgram[] = {\n";
    char line[96];
    for (const sock_filter& insn : program) {
      std::snprintf(line, sizeof line, "    {0x%04x, %u, %u, 0x%08x},\n", insn.code, insn.jt, insn.jf, insn.k);
      text += line;
    }
    text += "};\n\n}  // namespace\n\nstd::span<const sock_filter> WorkerSeccompProgram() { return kProgram; }\n\n"
            "}  // namespace basal::confinement\n";
    const std::string tmp = std::string(argv[2]) + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      if (!out.flush()) {
        std::fprintf(stderr, "basal-policy-dump: cannot write %s\n", tmp.c_str());
        return 1;
      }
    }
    if (std::rename(tmp.c_str(), argv[2]) != 0) {
      std::fprintf(stderr, "basal-policy-dump: cannot rename %s to %s\n", tmp.c_str(), argv[2]);
      return 1;
    }
    return 0;
  }
  pid_t pid = 4242;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--pid" && i + 1 < argc) {
      pid = static_cast<pid_t>(std::strtol(argv[++i], nullptr, 10));
    } else {
      return Usage();
    }
  }
  if (mode == "markdown") {
    std::fputs(basal::confinement::RenderPolicyMarkdown().c_str(), stdout);
    return 0;
  }
  SeccompFilter filter({pid, pid});
  if (!filter.ok()) {
    std::fprintf(stderr, "basal-policy-dump: the table does not compile: %s\n", filter.error().c_str());
    return 1;
  }
  std::string error;
  if (mode == "pfc") {
    std::string pfc;
    if (!filter.ExportPfc(pfc, error)) {
      std::fprintf(stderr, "basal-policy-dump: %s\n", error.c_str());
      return 1;
    }
    std::fputs(pfc.c_str(), stdout);
    return 0;
  }
  if (mode == "bpf") {
    std::vector<sock_filter> prog;
    if (!filter.ExportBpf(prog, error)) {
      std::fprintf(stderr, "basal-policy-dump: %s\n", error.c_str());
      return 1;
    }
    for (size_t i = 0; i < prog.size(); ++i) {
      std::printf("%4zu: code=0x%04x jt=%3u jf=%3u k=0x%08x\n", i, prog[i].code, prog[i].jt, prog[i].jf, prog[i].k);
    }
    return 0;
  }
  return Usage();
}
