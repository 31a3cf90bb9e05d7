/* Tail calls through jmp: at -O2, middle() ends in `jmp leaf` and outer() in `jmp middle`,
 * so neither leaves a frame; GDB rebuilds them from DW_TAG_call_site as tail-call frames. */
#define NOINLINE __attribute__((noinline))
volatile int sink;

NOINLINE void stop_here(int tag) { sink += tag; }
NOINLINE int leaf(int x) { stop_here(x); return sink + x; }
NOINLINE int middle(int x) { sink += 1; return leaf(x * 3); }
NOINLINE int outer(int x) { sink += 2; return middle(x + 5); }

int main(int argc, char **argv) { (void)argv; return outer(argc) + 1; }
