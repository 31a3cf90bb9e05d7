"""Every `unwind` command, one declaration each (see spec.py for what a declaration holds).

Help texts: {debugger} becomes GDB or LLDB, {json}, {sources}, {count},
{all} the option as that debugger spells it, {source_names} the sources the
engine has, {settings} the settings that debugger offers.
"""
from __future__ import annotations

from typing import Dict, Tuple

from plugin.commands.spec import VALIDATE_STEPS, CommandSpec, Debugger, Words, WordsKind

GDB, LLDB = Debugger.GDB, Debugger.LLDB

BACKTRACE = CommandSpec(
    "backtrace", "Print the plugin's own backtrace from the selected frame.",
    ("json", "sources", "count"),
    words=(Words(WordsKind.THREADS_COUNT, "[all] [N|-N]", debuggers=(LLDB,)), Words(WordsKind.COUNT, "[N|-N]")),
    about="""One line per frame: level, pc, function, module, and which source found it
(e.g. "found by: .eh_frame CFI"), then the reason the walk stopped.""",
    notes={GDB: """Levels are GDB's, as "bt" numbers frames: inline and tail-call frames appear,
marked, beside the physical frame they share; the walk unwinds only as far
as the levels asked for.
N shows the innermost N frames, -N the outermost N (as "bt -N" does). {sources} picks and orders the sources for
this walk only (see "set unwind sources").
Sources: {source_names}.""",
           LLDB: """Levels are LLDB's frame numbers, as "bt" numbers frames: inlined and artificial
(tail-call) frames appear, marked, beside the physical frame they share.
N (or {count} N) shows the innermost N frames, -N the outermost N; {sources} picks and orders the sources for
this walk. Sources: {source_names}.
"all" first (as in "bt all") shows every thread's backtrace, each from its innermost frame."""},
    json_keys=("version", "frames", "stop_reason", "stop_detail", "stop_attempts"),
    json_sometimes={"threads": "LLDB, with all: each thread's backtrace, with its thread, tid and name"})

EXPLAIN = CommandSpec(
    "explain", "Explain how the plugin recovered one frame, or all of them.",
    ("json", "sources", "verbose"),
    words=(Words(WordsKind.LEVEL, "[LEVEL|all]"),),
    about="""Shows the module and section, the table entry (FDE and CIE offsets and the
range they cover), the row in readable form (CFA = rsp+16, rip = [CFA-8]),
every value read and the address it came from, the sources tried first and
why they were rejected, and whether {debugger}'s own unwinder agrees.
Expressions are written readably (CFA = *(rsp+160)); {verbose} adds the
raw DWARF operations. Text wraps at the terminal's width.""",
    notes={GDB: """LEVEL is GDB's frame level, as "bt" numbers frames (default: the selected
frame). An inline or tail-call frame is explained as the physical frame it
shares. A frame GDB's bt took from the plugin says what GDB's Python
unwinder API loses there.""",
           LLDB: """LEVEL is LLDB's frame number, as "bt" numbers frames (default: the selected
frame). An inlined or artificial (tail-call) frame is explained as the physical
frame it shares."""},
    json_keys=("version", "frames", "stop_reason", "stop_detail"),
    json_sometimes={"supplied": "LLDB: the levels \"unwind provider\" supplied to LLDB"})

TABLES = CommandSpec(
    "tables", "Show every unwind table entry that covers an address or function.",
    ("json", "all"),
    words=(Words(WordsKind.EXPRESSION, "ADDRESS|FUNCTION"),),
    about="""Like LLDB's "image show-unwind": every source's entry and the row in force.""",
    notes={LLDB: """ADDRESS|FUNCTION is a number, $register, function name (optionally +OFFSET)
or an expression. With {all}, every entry of every module instead.
Works without a process (e.g. "lldb-16 libfoo.so"): addresses are then the
module's file addresses, as "python -m plugin tables FILE" prints them."""},
    json_keys=("sources", "problems"), json_sometimes={"agreement": "with an address"})

COMPARE = CommandSpec(
    "compare", "Compare the plugin's frames with {debugger}'s own, frame by frame.",
    ("json", "sources"),
    about="""Each disagreement is marked, with which side looks right where the code can
tell (a return address must be executable and follow a call instruction).""",
    notes={GDB: "GDB's frames are computed with the plugin's unwinder disabled.",
           LLDB: """LLDB's inlined and artificial frames are compared as the physical frame they
share; each row is labelled with that frame's LLDB number."""},
    json_keys=("frames", "agree", "summary", "stop_reason"))

MODULES = CommandSpec(
    "modules", "List each module, its base address, and which unwind tables were found where.",
    ("json",),
    notes={LLDB: """Works with or without a process: without one, each module is shown at its
file addresses."""},
    json_keys=("modules", "unreadable"))

# LLDB 16's Python API cannot add entries to LLDB's own `settings set`; GDB
# has `set/show unwind NAME`, built from plugin.settings.SETTINGS instead.
SETTINGS = CommandSpec(
    "settings", "Show or change the plugin's settings: {setting_names}.",
    ("json",),
    words=(Words(WordsKind.SETTING, "[NAME [VALUE]]"),),
    about="""With no NAME, shows every setting; with a NAME, that one; with a NAME and a
VALUE, changes it (and shows it). Settings last for the debugger session,
across targets and re-runs (put them in ~/.lldbinit after the import to keep
them).

Settings:
{settings}

Examples:
  unwind settings sources cfi,frame-pointer   tables, then frame records
  unwind settings sources scan                stack scanning only
  unwind settings max-frames 200000
The {sources} option of a command overrides the sources for one walk.
LLDB 16's Python API cannot add entries to LLDB's own `settings set`,
hence this command.""",
    debuggers=(LLDB,))

VALIDATE = CommandSpec(
    "validate", "Check each unwind table against one real call of a function, step by step.",
    ("json", "sources", "steps"),
    words=(Words(WordsKind.OPTIONAL_EXPRESSION, "[FUNCTION|ADDRESS]"),),
    about="""Starts at a function's first instruction: where the program is stopped, or,
given a FUNCTION or ADDRESS, at a temporary breakpoint there (the program is
continued to reach it). At the entry the truth is known without any table:
the CFA, the return address and every callee-saved register. The function is
then stepped one instruction at a time, stepping over calls, until it
returns (at most {steps} N instructions, %d by default); at every instruction
each source's answer for the caller is compared with that truth. Each wrong
instruction is listed with the row in force and the predicted and true
values; one line per source sums up ("cfi: 12/12 instructions right").
{sources} names the sources to check (default: the table sources of the
current setting). The program really runs the function: it is left stopped
after the return (or where stepping ended), and the report says where.""" % VALIDATE_STEPS,
    json_keys=("function", "entry", "cfa", "return_address", "steps", "instructions", "path", "ending",
               "ending_detail", "complete", "inferior", "sources", "wrong"))


PROVIDER = CommandSpec(
    "provider", "Let LLDB's own bt use the plugin's frames where LLDB's unwinder stops.",
    ("json",),
    words=(Words(WordsKind.SWITCH, "[on|off]"),),
    about="""The plugin registers a scripted frame provider on every target as loaded
(LLDB 22 or later, which has the frame provider API): on targets created
later at their first stop. on registers it on the target; off removes it and
keeps it off for targets that stop later; with no word, shows whether it is
on. With "unwind settings guesses off" (the default) only the plugin's
proven frames are supplied, up to its first frame-pointer or scan guess.
It only adds: LLDB's own frames are kept as long as LLDB has them; where LLDB's unwinder stops and the plugin's walk agrees with
every frame LLDB had, the plugin's further frames are supplied, marked
[synthetic] in "bt" and "supplied" in "unwind explain". Supplied frames
carry a pc only: LLDB 22.1 cannot show their registers or variables.""",
    json_keys=("provider", "lldb_version"),
    debuggers=(LLDB,))

CACHE = CommandSpec(
    "cache", "Show each of the plugin's caches: entries, bound, hits and misses.",
    ("json",),
    about="""One line per cache the plugin keeps for the selected program, grouped by what
holds it: entries now and the bound at which it is cleared, and how often it
answered (hits) or had to work the answer out (misses) since it was made.
Caches of one kind kept per module (CFI rows, say) are summed, with how
many there are.""",
    notes={GDB: """The unwinder's caches are those GDB's own bt fills (declines by pc, the
plans it replays, GDB's coverage); a "bt" moves their counts.""",
           LLDB: """The plans are those "unwind backtrace" (and, in LLDB 22, "unwind provider")
replay; "unwind backtrace" moves their counts."""},
    json_keys=("caches",))

COMMANDS = (BACKTRACE, EXPLAIN, TABLES, COMPARE, MODULES, CACHE, SETTINGS, VALIDATE, PROVIDER)
COMMAND_BY_NAME: Dict[str, CommandSpec] = {c.name: c for c in COMMANDS}

PREFIX_SUMMARY = "Recover the stack from unwind tables and explain every frame."


def commands_for(debugger: Debugger) -> Tuple[CommandSpec, ...]:
    """The commands one debugger has, in the order `help unwind` lists them."""
    return tuple(c for c in COMMANDS if debugger in c.debuggers)
