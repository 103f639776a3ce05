/* The fork+exec reference: a dynamically linked hello world (libc only), spawned, read and reaped
 * by the bench the way the parent spawns ck-basal-worker. */
#include <stdio.h>

int main(void) {
  puts("hello");
  return 0;
}
