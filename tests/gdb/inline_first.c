/* Frame 0 in inlined code: outer's first instructions belong to helper, inlined into it.
 * `break *outer` stops at outer's first instruction, where GDB's frame 0 is the
 * inline frame `helper` and outer's own (physical) frame is GDB's level 1. */
#define NOINLINE __attribute__((noinline))
volatile int sink;

static inline __attribute__((always_inline)) int helper(int x) { return sink * x + 7; }

NOINLINE int before(int x) { sink += x; return sink; }   /* the function just before outer */

NOINLINE int outer(int n) { int r = helper(n); before(r); return r + sink; }

NOINLINE int caller(int n) { int r = outer(n + 1); sink += r; return r * 2; }

int main(int argc, char **argv) { (void)argv; return caller(argc) & 1; }
