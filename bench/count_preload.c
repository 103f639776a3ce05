// libbasal-bench-count.so: a measuring aid for docs/performance.md ("Where the time goes"), never
// linked into basal. Preloaded into a process (LD_PRELOAD; the static worker is unaffected), it
// counts that process's SQLite statements by their SQL text (sqlite3_step up to its first result,
// so a SELECT read row by row counts once) and its malloc-family calls, and at exit appends one
// report to the file named by BASAL_COUNT_OUT (stderr if unset), tagged with the pid:
//
//   LD_PRELOAD=build/release/lib/libbasal-bench-count.so BASAL_COUNT_OUT=/tmp/counts.txt
//       build/release/bin/basal-bench --only warm      (one command line)
//
// Counts are whole-process: subtract two runs of different lengths for a per-iteration figure.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);

static atomic_ulong mallocs, callocs, reallocs, frees;

void* malloc(size_t n) {
  atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  atomic_fetch_add_explicit(&callocs, 1, memory_order_relaxed);
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  atomic_fetch_add_explicit(&reallocs, 1, memory_order_relaxed);
  return __libc_realloc(p, n);
}
void free(void* p) {
  if (p) atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
  __libc_free(p);
}

// Statements by text: a small open-addressing table keyed by the SQL's contents (a statement's
// text is freed when it is finalized, so the table keeps its own copy, made with __libc_malloc
// so that it is not counted), guarded by a spin lock: the journal's checkpointer thread steps too.
enum { kSlots = 4096 };
static struct {
  char* sql;
  unsigned long steps;
} table[kSlots];
static atomic_flag lock = ATOMIC_FLAG_INIT;

static void CountStatement(const char* sql) {
  if (!sql) return;
  size_t h = 1469598103934665603ull;
  for (const char* c = sql; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  h %= kSlots;
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {
  }
  for (size_t i = 0; i < kSlots; ++i, h = (h + 1) % kSlots) {
    if (table[h].sql == NULL) {
      const size_t n = strlen(sql) + 1;
      table[h].sql = __libc_malloc(n);
      if (!table[h].sql) break;
      memcpy(table[h].sql, sql, n);
    } else if (strcmp(table[h].sql, sql) != 0) {
      continue;
    }
    table[h].steps++;
    break;
  }
  atomic_flag_clear_explicit(&lock, memory_order_release);
}

typedef int (*StepFn)(sqlite3_stmt*);

int sqlite3_step(sqlite3_stmt* stmt) {
  static StepFn next;
  if (!next) next = (StepFn)dlsym(RTLD_NEXT, "sqlite3_step");
  // Only the first step of an execution: a statement not yet stepped since its reset.
  if (!sqlite3_stmt_busy(stmt)) CountStatement(sqlite3_sql(stmt));
  return next(stmt);
}

typedef int (*ExecFn)(sqlite3*, const char*, int (*)(void*, int, char**, char**), void*, char**);

int sqlite3_exec(sqlite3* db, const char* sql, int (*cb)(void*, int, char**, char**), void* arg, char** err) {
  static ExecFn next;
  if (!next) next = (ExecFn)dlsym(RTLD_NEXT, "sqlite3_exec");
  CountStatement(sql);  // exec's own steps go through the library's internal step, not the one above
  return next(db, sql, cb, arg, err);
}

__attribute__((destructor)) static void Report(void) {
  const char* path = getenv("BASAL_COUNT_OUT");
  FILE* out = path ? fopen(path, "a") : stderr;
  if (!out) return;
  char exe[256] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = '\0';
  fprintf(out, "pid %d %s\nmalloc %lu calloc %lu realloc %lu free %lu\n", (int)getpid(), exe,
          atomic_load(&mallocs), atomic_load(&callocs), atomic_load(&reallocs), atomic_load(&frees));
  for (size_t i = 0; i < kSlots; ++i) {
    if (!table[i].sql) continue;
    fprintf(out, "stmt %lu\t", table[i].steps);
    for (const char* c = table[i].sql; *c && c - table[i].sql < 160; ++c) fputc(*c == '\n' ? ' ' : *c, out);
    fputc('\n', out);
  }
  fprintf(out, "end %d\n", (int)getpid());
  if (out != stderr) fclose(out);
}
