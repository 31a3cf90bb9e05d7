#!/usr/bin/env bash
# The main demo: a real program under GDB, stopped inside a signal handler
# called from qsort's comparator, with the plugin explaining every frame.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh demo
mkdir -p examples/build
gcc -g -O2 -fomit-frame-pointer -o examples/build/demo examples/demo.c
exec gdb -q -batch -nx \
    -ex "source gdb_unwinder/gdbinit.py" \
    -ex "handle SIGUSR1 nostop noprint pass" \
    -ex "break report" -ex "run" \
    -ex "echo \n--- GDB's bt (the plugin's unwinder is active) ---\n" -ex "bt" \
    -ex "echo \n--- unwind backtrace ---\n" -ex "unwind backtrace" \
    -ex "echo \n--- unwind explain 2 ---\n" -ex "unwind explain 2" \
    -ex "echo \n--- unwind compare ---\n" -ex "unwind compare" \
    examples/build/demo
