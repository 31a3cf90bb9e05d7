/* The demo: a stack that crosses libc twice (qsort's comparator, a signal
 * handler), built without frame pointers so only the unwind tables can
 * recover it. `examples/demo.sh` stops in report() and asks the plugin why
 * each frame is what it is. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile int reports;

__attribute__((noinline)) void report(int where) { reports += where; }

static void on_alarm(int sig) { report(sig); }

static int by_value(const void *a, const void *b) {
    static int once;
    if (!once) { once = 1; raise(SIGUSR1); }
    return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) void sort_scores(int *scores, int n) {
    qsort(scores, n, sizeof scores[0], by_value);
}

int main(void) {
    int scores[] = {42, 7, 19, 88, 3};
    signal(SIGUSR1, on_alarm);
    sort_scores(scores, 5);
    printf("lowest score: %d\n", scores[0]);
    return 0;
}
