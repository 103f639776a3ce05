// The worker's terminate handler, replacing libstdc++'s verbose one (linked by its name,
// __gnu_cxx::__verbose_terminate_handler, so the library's own is never pulled in).
//
// Why: the library's handler demangles the exception's type name, which links libstdc++'s C++
// demangler into the static worker (vterminate.o and cp-demangle.o: about 38 KB of text). All of
// the worker's text is resident in every idle worker on this kernel (docs/performance.md, "Idle
// worker RSS"), and without them the measured idle RSS fell from 2,132 to 2,004 KiB. This one says
// what an uncaught exception was (its what(), without the type's name) on stderr, where the parent
// keeps the worker's last lines, then aborts as the library's did.
#include <cxxabi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>

namespace {

void WriteAll(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;  // nothing more can be said
    text += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

namespace __gnu_cxx {

void __verbose_terminate_handler() {
  static bool terminating = false;  // a what() that throws lands here again: abort at once
  if (!terminating) {
    terminating = true;
    const char* what = "std::terminate called without an active exception";
    if (std::exception_ptr e = std::current_exception()) {
      what = "an exception that is not a std::exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      WriteAll("ck-basal-worker: terminate called after an uncaught exception: ");
    } else {
      WriteAll("ck-basal-worker: ");
    }
    WriteAll(what);
    WriteAll("\n");
  }
  std::abort();
}

}  // namespace __gnu_cxx
