"""ARM EHABI test helpers: the tables of an ELF file, and the dumps of readelf and llvm-readobj.

Both dumps are parsed into the same shape as the plugin's decode is turned
into, so a test compares meaning (which registers are popped, by how much
vsp moves), not spelling:

    {"function": int, "kind": "cantunwind" | "inline" | "table", "table": int | None,
     "index": int | None, "personality": int | None,
     "ops": [(bytes, meaning)] | None}     # None: the dump shows no opcodes

meaning is ("vsp-add", n), ("vsp-sub", n), ("vsp-from-register", n),
("finish",), ("refuse",) or (kind, registers) for pops, kind one of "pop",
"pop-vfp", "pop-wmmx", "pop-wmmx-control".
"""

import re

from elftools.elf.elffile import ELFFile

from plugin.formats.exidx import ExidxTable
from plugin.formats.exidx_ops import OpKind
from plugin.memory import Region

LLVM_NAMES = {"fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}


def file_table(path):
    """(ExidxTable, personality_name) for an ELF file's .ARM.exidx at its link addresses."""
    elf = ELFFile(open(path, "rb"))
    index = elf.get_section_by_name(".ARM.exidx")
    extab = elf.get_section_by_name(".ARM.extab")
    index_region = Region.from_bytes(".ARM.exidx", index["sh_addr"], index.data())
    extab_region = (Region.from_bytes(".ARM.extab", extab["sh_addr"], extab.data())
                    if extab is not None else None)
    names = {}
    symtab = elf.get_section_by_name(".symtab")
    for sym in (symtab.iter_symbols() if symtab is not None else ()):
        if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
            names.setdefault(sym["st_value"], sym.name)
    table = ExidxTable(index_region, lambda address: extab_region)
    return table, names.get


def meaning_of(instruction):
    kind = instruction.kind
    if kind in (OpKind.VSP_ADD, OpKind.VSP_SUB):
        return (kind.value, instruction.amount)
    if kind == OpKind.VSP_FROM_REGISTER:
        return (kind.value, instruction.register)
    if kind in (OpKind.FINISH, OpKind.REFUSE):
        return (kind.value,)
    return (kind.value, tuple(instruction.registers))


def plugin_entries(table, personality_name):
    out = []
    for entry in table.entries():
        unwind = table.describe(entry, personality_name)
        item = {"function": entry.function, "kind": entry.kind.value, "table": entry.table,
                "index": unwind.personality_index, "personality": unwind.personality, "ops": None}
        if unwind.decoded:
            item["ops"] = [(ins.raw, meaning_of(ins)) for ins in unwind.instructions]
        out.append(item)
    return out


def _register_list(text, llvm):
    """Registers of a `pop {...}` text -> (kind, registers)."""
    regs, kind = [], None
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        m = re.fullmatch(r"([A-Za-z]+)(\d*)(?:-[A-Za-z]+(\d+))?", part)
        if m is None:
            raise ValueError("cannot read register %r" % part)
        prefix, first, last = m.group(1), m.group(2), m.group(3)
        if llvm and prefix in LLVM_NAMES and not first:
            this, numbers = "pop", [LLVM_NAMES[prefix]]
        else:
            this = {"r": "pop", "d": "pop-vfp", "wr": "pop-wmmx", "wcgr": "pop-wmmx-control"}[prefix.lower()]
            numbers = list(range(int(first), int(last if last else first) + 1))
        if kind not in (None, this):
            raise ValueError("mixed register kinds in %r" % text)
        kind = this
        regs.extend(numbers)
    return (kind, tuple(regs))


def meaning_from_text(text, llvm=False):
    text = text.strip()
    for pattern, kind in ((r"vsp = vsp \+ (\d+)", "vsp-add"), (r"vsp = vsp - (\d+)", "vsp-sub"),
                          (r"vsp = r(\d+)", "vsp-from-register")):
        m = re.fullmatch(pattern, text)
        if m:
            return (kind, int(m.group(1)))
    if text == "finish":
        return ("finish",)
    if text.lower() == "refuse to unwind":
        return ("refuse",)
    m = re.fullmatch(r"pop \{(.*)\}", text)
    if m:
        return _register_list(m.group(1), llvm)
    raise ValueError("unknown opcode text %r" % text)


_HEAD = re.compile(r"^(0x[0-9a-f]+)(?: <[^>]*>)?: (.*)$")
_OP = re.compile(r"^  ((?:0x[0-9a-f]{2} )+)\s*(.*)$")


def parse_readelf(text):
    """Entries of `readelf -u` (binutils) for one .ARM.exidx section."""
    out, item = [], None
    for line in text.splitlines():
        if not line.strip() or line.startswith("Unwind section"):
            continue
        head = _HEAD.match(line)
        if head:
            rest = head.group(2)
            item = {"function": int(head.group(1), 16), "table": None, "index": None,
                    "personality": None, "ops": None}
            if rest.endswith("[cantunwind]"):
                item["kind"] = "cantunwind"
            elif rest.startswith("@"):
                item["kind"], item["table"] = "table", int(rest[1:], 16)
            else:
                item["kind"] = "inline"
            out.append(item)
            continue
        m = re.match(r"^  Compact model index: (\d+)$", line)
        if m:
            item["index"] = int(m.group(1))
            item["ops"] = []
            continue
        m = re.match(r"^  Personality routine: (0x[0-9a-f]+)", line)
        if m:
            item["personality"] = int(m.group(1), 16)
            continue
        m = _OP.match(line)
        if m:
            raw = bytes(int(b, 16) for b in m.group(1).split())
            item["ops"] = (item["ops"] or []) + [(raw, meaning_from_text(m.group(2)))]
            continue
        raise ValueError("unexpected readelf line %r" % line)
    return out


def parse_llvm(text):
    """Entries of `llvm-readobj --unwind` (or llvm-readelf -u) for one .ARM.exidx section."""
    out, item, in_ops = [], None, False
    for line in text.splitlines():
        s = line.strip()
        if s == "Entry {":
            item = {"function": None, "kind": None, "table": None, "index": None,
                    "personality": None, "ops": None}
            out.append(item)
        elif item is None:
            continue
        elif s == "Opcodes [":
            in_ops, item["ops"] = True, []
        elif in_ops and s == "]":
            in_ops = False
        elif in_ops:
            raw_text, meaning = s.split(";", 1)
            raw = bytes(int(b, 16) for b in raw_text.split())
            item["ops"].append((raw, meaning_from_text(meaning, llvm=True)))
        elif s.startswith("FunctionAddress:"):
            item["function"] = int(s.split(":")[1], 16)
        elif s.startswith("TableEntryAddress:"):
            item["table"] = int(s.split(":")[1], 16)
        elif s.startswith("PersonalityIndex:"):
            item["index"] = int(s.split(":")[1])
        elif s.startswith("PersonalityRoutineAddress:"):
            item["personality"] = int(s.split(":")[1], 16)
        elif s.startswith("Model:"):
            model = s.split(":", 1)[1].strip()
            item["kind"] = {"CantUnwind": "cantunwind", "Compact (Inline)": "inline"}.get(model, "table")
    return out

