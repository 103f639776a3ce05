// A tiny classic-BPF interpreter for the seccomp filter's unit tests: it runs the program
// exactly as exported by libseccomp against a synthetic struct seccomp_data, so the tests state
// what the kernel would decide without installing anything. Unknown opcodes are a test failure.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace basal::confinement::testing {

struct BpfRun {
  bool ok = false;     // false: the program is malformed (error says why)
  uint32_t ret = 0;    // the seccomp return value
  std::string error;
};

inline BpfRun RunSeccompBpf(const std::vector<sock_filter>& prog, const seccomp_data& data) {
  BpfRun run;
  uint32_t a = 0;
  uint32_t x = 0;
  uint32_t mem[BPF_MEMWORDS] = {};
  size_t pc = 0;
  for (size_t steps = 0; steps <= prog.size(); ++steps) {  // classic BPF only jumps forward
    if (pc >= prog.size()) {
      run.error = "fell off the end of the program";
      return run;
    }
    const sock_filter& in = prog[pc];
    const uint32_t src = BPF_SRC(in.code) == BPF_X ? x : in.k;
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
        if (in.code == (BPF_LD | BPF_W | BPF_ABS)) {
          if (in.k % 4 != 0 || in.k + 4 > sizeof(data)) {
            run.error = "load outside seccomp_data at " + std::to_string(in.k);
            return run;
          }
          std::memcpy(&a, reinterpret_cast<const char*>(&data) + in.k, 4);
        } else if (in.code == (BPF_LD | BPF_IMM)) {
          a = in.k;
        } else if (in.code == (BPF_LD | BPF_MEM) && in.k < BPF_MEMWORDS) {
          a = mem[in.k];
        } else {
          run.error = "unsupported load opcode " + std::to_string(in.code);
          return run;
        }
        ++pc;
        break;
      case BPF_LDX:
        if (in.code == (BPF_LDX | BPF_IMM)) {
          x = in.k;
        } else if (in.code == (BPF_LDX | BPF_MEM) && in.k < BPF_MEMWORDS) {
          x = mem[in.k];
        } else {
          run.error = "unsupported ldx opcode " + std::to_string(in.code);
          return run;
        }
        ++pc;
        break;
      case BPF_ST:
      case BPF_STX:
        if (in.k >= BPF_MEMWORDS) {
          run.error = "store outside scratch memory";
          return run;
        }
        mem[in.k] = BPF_CLASS(in.code) == BPF_ST ? a : x;
        ++pc;
        break;
      case BPF_ALU:
        switch (BPF_OP(in.code)) {
          case BPF_ADD: a += src; break;
          case BPF_SUB: a -= src; break;
          case BPF_MUL: a *= src; break;
          case BPF_AND: a &= src; break;
          case BPF_OR: a |= src; break;
          case BPF_XOR: a ^= src; break;
          case BPF_LSH: a = src < 32 ? a << src : 0; break;
          case BPF_RSH: a = src < 32 ? a >> src : 0; break;
          case BPF_NEG: a = 0 - a; break;
          case BPF_DIV:
            if (src == 0) {
              run.error = "division by zero";
              return run;
            }
            a /= src;
            break;
          default:
            run.error = "unsupported alu opcode " + std::to_string(in.code);
            return run;
        }
        ++pc;
        break;
      case BPF_JMP: {
        if (BPF_OP(in.code) == BPF_JA) {
          pc += 1 + in.k;
          break;
        }
        bool taken = false;
        switch (BPF_OP(in.code)) {
          case BPF_JEQ: taken = a == src; break;
          case BPF_JGT: taken = a > src; break;
          case BPF_JGE: taken = a >= src; break;
          case BPF_JSET: taken = (a & src) != 0; break;
          default:
            run.error = "unsupported jump opcode " + std::to_string(in.code);
            return run;
        }
        pc += 1 + (taken ? in.jt : in.jf);
        break;
      }
      case BPF_RET:
        run.ok = true;
        run.ret = BPF_RVAL(in.code) == BPF_A ? a : in.k;
        return run;
      case BPF_MISC:
        if (BPF_MISCOP(in.code) == BPF_TAX) {
          x = a;
        } else {
          a = x;
        }
        ++pc;
        break;
      default:
        run.error = "unsupported opcode class " + std::to_string(in.code);
        return run;
    }
  }
  run.error = "the program loops";
  return run;
}

}  // namespace basal::confinement::testing
