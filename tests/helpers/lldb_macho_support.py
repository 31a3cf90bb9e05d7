"""Helpers for the Mach-O tests in LLDB 16 (this file holds no tests).

* snapshots for lldb_commands/scripted_process.py: a Mach-O file laid out
  at its link addresses (so `image show-unwind`, which needs a process, can
  be asked about a file), and a Unicorn stop of tests/helpers/compact_unwind_support.py;
* parsers for what LLDB prints about its own unwinding: `image show-unwind`
  (every plan and its rows) and the `lldb unwind` log (the plan each frame
  was unwound with);
* rows compared by meaning: a plugin ROW (JSON) and an LLDB plan row.

Facts about LLDB 16 these rely on (each one checked by the tests):
  * `image show-unwind` needs a process ("error: Command requires a current
    process."), even for a static target;
  * it prints the compact unwind plan as "Compact unwind UnwindPlan:" with
    one row at offset 0; for x86_64 STACK_IND there is none (seen here; the
    reason, in LLDB's CompactUnwindInfo.cpp as read in an llvm-project
    revision, not in 16's own source: CreateUnwindPlan_x86_64 returns false
    for that mode, with a comment that Xcode 6's clang wrote wrong
    STACK_IND encodings), and for DWARF-mode opcodes neither (LLDB reads the
    __eh_frame FDE directly and prints it as "eh_frame UnwindPlan:");
  * a frame's plan is logged as "thN/frM Using full unwind plan 'NAME'" or
    "... Using fast unwind plan 'NAME'" (callers), "... using NAME
    UnwindPlan" (the innermost frame).
"""

import json
import re
from pathlib import Path

from support import tool_output

from plugin.file_targets.macho import MachOFileTarget

LAUNCH = "process launch -C lldb_commands.scripted_process.SnapshotProcess -k snapshot -v %s"
# A stack for the thread of a file snapshot: LLDB wants a thread to stop in.
FILE_STACK = 0x7000000, 0x10000


# ---------------------------------------------------------------------------
# Snapshots (the format is documented in lldb_commands/scripted_process.py)
# ---------------------------------------------------------------------------

def write_snapshot(path, images, regions, threads):
    """Write STOP.json and one raw file per region beside it.

    images: [(path, load address)]; regions: [(start, bytes, "rwx" subset, name)];
    threads: [{NAME: value}] (register values by LLDB's names).
    """
    path = Path(path)
    entries = []
    for n, (start, data, permissions, name) in enumerate(regions):
        raw = path.with_name("%s.region%d" % (path.stem, n))
        raw.write_bytes(data)
        entries.append({"start": start, "file": raw.name, "permissions": permissions, "name": name})
    snapshot = {"images": [{"path": str(p), "load_address": a} for p, a in images],
                "regions": entries,
                "threads": [{"tid": n + 1, "registers": r} for n, r in enumerate(threads)]}
    path.write_text(json.dumps(snapshot))
    return path


def file_snapshot(macho_path, out, pc=None, arch=None):
    """A snapshot of a Mach-O file mapped at its link addresses (slide 0), one
    thread stopped at pc (default: the start of __TEXT,__text) on a small stack."""
    target = MachOFileTarget(str(macho_path), arch=arch)
    regions = []
    for mapping in target.mappings():
        data = target.read_memory(mapping.start, mapping.end - mapping.start)
        regions.append((mapping.start, data, "rx" if mapping.executable else "r", None))
    stack, size = FILE_STACK
    regions.append((stack, bytes(size), "rw", "[stack]"))
    if pc is None:
        pc = target.image.section("__TEXT", "__text").addr
    a = target.arch
    registers = {a.name_of(a.pc): pc, a.name_of(a.sp): stack + size - 0x100}
    return write_snapshot(out, [(macho_path, target.header_address)], regions, [registers])


def emulator_snapshot(em, out):
    """The Unicorn emulation `em` (stopped) as a snapshot: every mapping's
    bytes, the registers, the dylib at its load address."""
    regions = []
    for m in em.mapping_list():
        data = bytes(em.uc.mem_read(m.start, m.end - m.start))
        regions.append((m.start, data, "r" + ("w" if m.writable else "") + ("x" if m.executable else ""),
                        m.name))
    names = em.arch.registers
    registers = {names[n]: v for n, v in em.registers().items()}
    return write_snapshot(out, [(em.path, em.module_ref().header_address)], regions, [registers])


# ---------------------------------------------------------------------------
# `image show-unwind`
# ---------------------------------------------------------------------------

_PLAN_HEAD = re.compile(r"^(.+) UnwindPlan:$")
_ROW = re.compile(r"^row\[(\d+)\]:\s+(-?\d+): (.*)$")
# The plans LLDB picks for unwinding from any pc (async) and from call sites (sync).
_CHOSEN_PLAN = re.compile(r"^(Asynchronous \(not restricted|Synchronous \(restricted) to call-sites\) "
                          r"UnwindPlan is '(.*)'$")
_UNWIND_HEAD = re.compile(r"^UNWIND PLANS for (.+) \(start addr (0x[0-9a-fA-F]+)\)$")


def parse_show_unwind(text):
    """{"function", "start", "async", "sync", "plans": {NAME: {"source", "rows": [(offset, TEXT)]}}}.

    NAME is the section title without " UnwindPlan" ("Compact unwind",
    "eh_frame", "Assembly language inspection", ...).
    """
    out = {"function": None, "start": None, "async": None, "sync": None, "plans": {}}
    plan = None
    for line in text.splitlines():
        s = line.strip()
        m = _UNWIND_HEAD.match(s)
        if m:
            out["function"], out["start"] = m.group(1), int(m.group(2), 16)
            continue
        m = _CHOSEN_PLAN.match(s)
        if m:
            out["async" if m.group(1) == "Asynchronous (not restricted" else "sync"] = m.group(2)
            continue
        m = _PLAN_HEAD.match(s)
        if m and not s.startswith("This UnwindPlan"):
            plan = out["plans"].setdefault(m.group(1), {"source": None, "rows": []})
            continue
        if plan is None:
            continue
        m = re.match(r"^This UnwindPlan originally sourced from (.*)$", s)
        if m:
            plan["source"] = m.group(1)
            continue
        m = _ROW.match(s)
        if m:
            plan["rows"].append((int(m.group(2)), m.group(3).strip()))
    return out


_CFA = re.compile(r"^CFA=(\w+)\s*([+-])\s*(\d+)$")
_LOCATION = re.compile(r"^(\w+)=\[CFA([+-]\d+)\]$")
_IS_CFA = re.compile(r"^(\w+)=CFA([+-]\d+)$")
_SAME_AS = re.compile(r"^(\w+)=(\w+)$")


def lldb_row(text, arch):
    """An LLDB plan row ("CFA=rbp+16 => rbp=[CFA-16] rsp=CFA+0 rip=[CFA-8]")
    in the plugin's terms: {"cfa": (DWARF number, offset), "registers":
    {DWARF number: ("offset", N) | ("val_offset", N) | ("register", DWARF number)}}."""
    cfa_text, _, rules = text.partition("=>")
    m = _CFA.match(cfa_text.strip())
    assert m, "unparsed LLDB CFA rule %r" % text
    offset = int(m.group(3)) * (1 if m.group(2) == "+" else -1)
    out = {"cfa": (arch.number_of(m.group(1)), offset), "registers": {}}
    for rule in rules.split():
        for pattern, kind in ((_LOCATION, "offset"), (_IS_CFA, "val_offset")):
            m = pattern.match(rule)
            if m:
                out["registers"][arch.number_of(m.group(1))] = (kind, int(m.group(2)))
                break
        else:
            m = _SAME_AS.match(rule)
            assert m, "unparsed LLDB register rule %r in %r" % (rule, text)
            out["registers"][arch.number_of(m.group(1))] = ("register", arch.number_of(m.group(2)))
    return out


def plugin_row(row, arch):
    """A plugin ROW (tables JSON) in the same terms as lldb_row()."""
    cfa = row["cfa"]
    assert cfa["kind"] == "register" and not cfa.get("deref"), row
    out = {"cfa": (arch.number_of(cfa["register"]), cfa["offset"]), "registers": {}}
    for name, rule in row["registers"].items():
        number = arch.number_of(name)
        if rule["kind"] in ("offset", "val_offset"):
            out["registers"][number] = (rule["kind"], rule["offset"])
        elif rule["kind"] == "register":
            out["registers"][number] = ("register", arch.number_of(rule["register"]))
        elif rule["kind"] == "same":
            out["registers"][number] = ("same", None)
        else:
            out["registers"][number] = (rule["kind"], None)
    return out


def normalized(ours, theirs, arch):
    """A plugin row and an LLDB row (plugin_row(), lldb_row()) with what each
    side leaves implicit made explicit, ready to compare:
      * LLDB writes `sp=CFA+0` (the caller's sp is the CFA); the plugin's
        rows mean it without saying so;
      * on arm64 LLDB's compact plans speak of the caller's pc, the
        plugin's rows of the return address register x30: `pc=[CFA-8]` is
        `x30=[CFA-8]`, and `pc=x30` is `x30 same` (still in lr).
    """
    ours = {"cfa": ours["cfa"], "registers": dict(ours["registers"])}
    theirs = {"cfa": theirs["cfa"], "registers": dict(theirs["registers"])}
    if theirs["registers"].get(arch.sp) == ("val_offset", 0):
        del theirs["registers"][arch.sp]
    if arch.name == "aarch64" and arch.pc in theirs["registers"]:
        rule = theirs["registers"].pop(arch.pc)
        theirs["registers"].setdefault(arch.ra, ("same", None) if rule == ("register", arch.ra) else rule)
    return ours, theirs


def same_meaning(ours, theirs, arch):
    """Do a plugin row and an LLDB row say the same? [] if so, else the differences."""
    ours, theirs = normalized(ours, theirs, arch)
    problems = []
    if ours["cfa"] != theirs["cfa"]:
        problems.append("CFA: plugin %s%+d, LLDB %s%+d" % (arch.name_of(ours["cfa"][0]), ours["cfa"][1],
                                                         arch.name_of(theirs["cfa"][0]), theirs["cfa"][1]))
    for number in sorted(set(ours["registers"]) | set(theirs["registers"])):
        a, b = ours["registers"].get(number), theirs["registers"].get(number)
        if a != b:
            problems.append("%s: plugin %s, LLDB %s" % (arch.name_of(number), a, b))
    return problems


def only_lldb_has(ours, theirs, arch):
    """{DWARF number: LLDB's rule} of the registers only LLDB's row has a rule
    for, when the rows agree on everything else; None when they differ otherwise."""
    ours, theirs = normalized(ours, theirs, arch)
    extra = {n: r for n, r in theirs["registers"].items() if n not in ours["registers"]}
    if ours["cfa"] != theirs["cfa"] or any(theirs["registers"].get(n) != r for n, r in ours["registers"].items()):
        return None
    return extra


def dwarfdump_rows(path, arch=None):
    """{FDE pc_begin: [(row address, row text)]} of __eh_frame from
    `llvm-dwarfdump-16 --eh-frame` (an oracle the project did not write)."""
    text = tool_output("llvm-dwarfdump-16", "--eh-frame", *(["--arch", arch] if arch else []), str(path))
    fdes, rows = {}, None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]{8} [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.\.", line)
        if m:
            rows = fdes.setdefault(int(m.group(1), 16), [])
            continue
        if re.match(r"^[0-9a-f]{8} ", line):
            rows = None             # a CIE: its rows are not an FDE's
            continue
        m = re.match(r"^\s+0x([0-9a-f]+): (.*)$", line)
        if m and rows is not None:
            rows.append((int(m.group(1), 16), m.group(2)))
    return fdes


def dwarfdump_registers(text, arch):
    """DWARF numbers of the registers a llvm-dwarfdump row gives a rule for
    ("CFA=WSP+32: W19=[CFA-32], W30=[CFA-24]": x19, x30)."""
    _, _, rules = text.partition(": ")
    out = set()
    for name in re.findall(r"(\w+)=", rules):
        name = name.lower()
        if arch.name == "aarch64" and re.match(r"^w\d+$", name):
            name = "x" + name[1:]
        out.add(arch.number_of(name))
    return out


def row_at(plan, offset):
    """The row of an LLDB plan in force at `offset` from the function start."""
    found = None
    for row_offset, text in plan["rows"]:
        if row_offset <= offset:
            found = text
    return found


# ---------------------------------------------------------------------------
# The `lldb unwind` log
# ---------------------------------------------------------------------------

_LOG_CALLER = re.compile(r"th(\d+)/fr(\d+) Using (full|fast) unwind plan '(.*)'$")
_LOG_INNERMOST = re.compile(r"th(\d+)/fr0 initialized frame .* using (.*) UnwindPlan$")


def plans_from_log(text):
    """{frame index: [(kind, plan name)...]}: the plans LLDB unwound that frame's
    caller with, in the order logged, each once. kind is "full", "fast" (a
    plan LLDB tries first when it only needs the pc, sp and frame pointer:
    on x86_64 its rbp-chain default for a function with a standard
    `push %rbp; mov %rsp, %rbp` prologue) or "innermost" (frame 0, whose
    plan must hold at any instruction)."""
    plans = {}
    for line in text.splitlines():
        m = _LOG_CALLER.search(line)
        if m:
            item = (m.group(3), m.group(4))
            frame = int(m.group(2))
        else:
            m = _LOG_INNERMOST.search(line)
            if not m:
                continue
            item, frame = ("innermost", m.group(2)), 0
        if item not in plans.setdefault(frame, []):
            plans[frame].append(item)
    return plans
