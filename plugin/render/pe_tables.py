"""`python -m plugin tables FILE` for a PE file: every .pdata entry with its
x64 UNWIND_INFO and unwind codes, or its ARM64 packed fields or .xdata
record (header, epilogue scopes, opcodes), in substance as
`llvm-readobj --unwind` prints them; write_json gives the same entries as JSON
(addresses absolute, at the image's ImageBase, as llvm-readobj prints them)."""
from __future__ import annotations

import json
from typing import List, Optional, TextIO, Tuple

from plugin.errors import DecodeError
from plugin.formats import pdata_arm64 as arm64
from plugin.formats import pdata_x64 as x64
from plugin.formats import pe


def describe_code(code: x64.UnwindCode, info: x64.UnwindInfo) -> str:
    """One unwind code as a line: its prolog offset, operation and operands."""
    op = code.op
    if op in (x64.Op.PUSH_NONVOL,):
        detail = "reg=%s" % x64.GPR[code.info].upper()
    elif op in (x64.Op.ALLOC_LARGE, x64.Op.ALLOC_SMALL):
        detail = "size=%d" % code.operand
    elif op == x64.Op.SET_FPREG:
        detail = "reg=%s, offset=0x%x" % (x64.GPR[info.frame_register].upper(), info.frame_offset)
    elif op in (x64.Op.SAVE_NONVOL, x64.Op.SAVE_NONVOL_FAR):
        detail = "reg=%s, offset=0x%x" % (x64.GPR[code.info].upper(), code.operand)
    elif op in (x64.Op.SAVE_XMM128, x64.Op.SAVE_XMM128_FAR):
        detail = "reg=XMM%d, offset=0x%x" % (code.info, code.operand)
    elif op == x64.Op.PUSH_MACHFRAME:
        detail = "errcode=%s" % ("yes" if code.info else "no")
    else:
        detail = "info=%d, operand=0x%x" % (code.info, code.operand)
    return "0x%02x: %s %s" % (code.offset, op.name, detail)


def write_text(path: str, out: TextIO, address: Optional[int] = None) -> int:
    """Exit status: 0 every entry decoded, 1 some not (each said), DecodeError if none can be.
    address: only the entry whose function holds it."""
    headers, rva_read = _open(path)
    out.write("File: %s\nFormat: PE32+ %s\nImageBase: 0x%x\n"
              % (path, headers.machine.name, headers.image_base))
    if not headers.exception_rva:
        out.write("no exception directory (.pdata): no unwind data\n")
        return 0
    wanted = None
    if address is not None:
        wanted = {e["start"] for e in entries_json(rva_read, headers, [], headers.image_base) if covers(e, address)}
        if not wanted:
            out.write("no .pdata entry covers 0x%x\n" % address)
            return 0
    if headers.machine == pe.Machine.ARM64:
        return _write_arm64(rva_read, headers, out, wanted)
    status = 0
    base = headers.image_base
    for fn in x64.read_runtime_functions(rva_read, headers.exception_rva, headers.exception_size):
        if wanted is not None and base + fn.begin not in wanted:
            continue
        out.write("RuntimeFunction 0x%x-0x%x UnwindInfo 0x%x\n"
                  % (base + fn.begin, base + fn.end, base + fn.unwind_info))
        try:
            infos = x64.chain(rva_read, fn)
        except DecodeError as exc:
            out.write("  problem: %s\n" % exc)
            status = 1
            continue
        for info in infos:
            out.write("  Version %d Flags 0x%x%s PrologSize %d FrameRegister %s FrameOffset 0x%x "
                      "Codes %d\n" % (info.version, info.flags,
                                      "".join(" " + f.name for f in x64.Flag if info.flags & f),
                                      info.prolog_size,
                                      x64.GPR[info.frame_register].upper()
                                      if info.frame_register else "-",
                                      info.frame_offset, sum(c.slots for c in info.codes)))
            for code in info.codes:
                out.write("    %s\n" % describe_code(code, info))
            if info.handler is not None:
                out.write("    Handler 0x%x\n" % (base + info.handler))
            if info.chained is not None:
                out.write("    Chained 0x%x-0x%x UnwindInfo 0x%x\n"
                          % (base + info.chained.begin, base + info.chained.end,
                             base + info.chained.unwind_info))
    return status


def _opcode_text(op: arm64.Opcode) -> str:
    reg = arm64.register(op)
    return "%-12s %-14s%s%s" % (op.raw.hex(), op.name, " " + reg if reg else "",
                               " #%d" % arm64.operand(op) if arm64.operand(op) else "")


def _write_arm64(read, headers: pe.PEHeaders, out: TextIO, wanted=None) -> int:
    status = 0
    base = headers.image_base
    for entry in arm64.read_entries(read, headers.exception_rva, headers.exception_size):
        if wanted is not None and base + entry.begin not in wanted:
            continue
        out.write("RuntimeFunction 0x%x %s\n" % (base + entry.begin, entry.flag.name))
        if entry.packed is not None:
            p = entry.packed
            out.write("  FunctionLength %d RegF %d RegI %d H %d CR %d (%s) FrameSize %d\n"
                      % (p.function_length, p.reg_f, p.reg_i, p.homed, p.cr, p.cr.name,
                         p.frame_size))
            continue
        if entry.xdata is None:
            out.write("  problem: reserved Flag 3\n")
            status = 1
            continue
        try:
            x = arm64.read_xdata(read, entry.xdata)
            prologue = arm64.opcodes(x.codes)
            scopes = [(s, arm64.opcodes(x.codes, s.start_index)) for s in x.scopes]
            packed_epilogue = arm64.opcodes(x.codes, x.epilogue_count) \
                if x.epilogue_packed and x.epilogue_count < len(x.codes) else []
        except DecodeError as exc:
            out.write("  problem: %s\n" % exc)
            status = 1
            continue
        out.write("  XData 0x%x FunctionLength %d Version %d ExceptionData %s EpiloguePacked %s "
                  "%s %d CodeBytes %d\n"
                  % (base + x.rva, x.function_length, x.version, x.has_exception_data,
                     x.epilogue_packed, "EpilogueIndex" if x.epilogue_packed else "EpilogueScopes",
                     x.epilogue_count, len(x.codes)))
        out.write("  Prologue\n")
        for op in prologue:
            out.write("    %s\n" % _opcode_text(op))
        if packed_epilogue:
            out.write("  Epilogue (packed, at the function's end) from index %d\n" % x.epilogue_count)
            for op in packed_epilogue:
                out.write("    %s\n" % _opcode_text(op))
        for scope, ops in scopes:
            out.write("  Epilogue at +0x%x from index %d\n" % (scope.offset, scope.start_index))
            for op in ops:
                out.write("    %s\n" % _opcode_text(op))
        if x.handler is not None:
            out.write("  Handler 0x%x\n" % (base + x.handler))
    return status


def _open(path: str) -> Tuple[pe.PEHeaders, pe.Read]:
    with open(path, "rb") as f:
        data = f.read()
    read = pe.file_reader(data)
    headers = pe.read_headers(read)
    return headers, pe.rva_reader(read, headers, "file")


def code_json(code: x64.UnwindCode, info: x64.UnwindInfo) -> dict:
    """One x64 unwind code: its prolog offset, operation, register, operand and llvm-readobj's text."""
    out = {"offset": code.offset, "op": code.op.name, "slots": code.slots}
    if code.op in (x64.Op.PUSH_NONVOL, x64.Op.SAVE_NONVOL, x64.Op.SAVE_NONVOL_FAR):
        out["register"] = x64.GPR[code.info]
    elif code.op == x64.Op.SET_FPREG:
        out["register"] = x64.GPR[info.frame_register]
    elif code.op in (x64.Op.SAVE_XMM128, x64.Op.SAVE_XMM128_FAR):
        out["register"] = "xmm%d" % code.info
    else:
        out["info"] = code.info
    if code.op in (x64.Op.ALLOC_LARGE, x64.Op.ALLOC_SMALL):
        out["size"] = code.operand
    elif code.op != x64.Op.PUSH_NONVOL:
        out["operand"] = code.operand if code.op != x64.Op.SET_FPREG else info.frame_offset
    out["text"] = describe_code(code, info).split(": ", 1)[1]
    return out


def _range_json(base: int, fn: x64.RuntimeFunction) -> dict:
    return {"start": base + fn.begin, "end": base + fn.end, "unwind_info": base + fn.unwind_info}


def info_json(info: x64.UnwindInfo, base: int) -> dict:
    """One UNWIND_INFO record with its codes (the chained entry, not followed, by its addresses)."""
    return {"address": base + info.rva, "version": info.version, "flags": int(info.flags),
            "flag_names": [f.name for f in x64.Flag if info.flags & f], "prolog_size": info.prolog_size,
            "frame_register": x64.GPR[info.frame_register] if info.frame_register else None,
            "frame_offset": info.frame_offset, "code_slots": sum(c.slots for c in info.codes),
            "codes": [code_json(c, info) for c in info.codes],
            "handler": base + info.handler if info.handler is not None else None,
            "chained": _range_json(base, info.chained) if info.chained is not None else None}


def _x64_entries(read, headers: pe.PEHeaders, problems: List[str], base: int) -> List[dict]:
    out = []
    for fn in x64.read_runtime_functions(read, headers.exception_rva, headers.exception_size):
        entry = _range_json(base, fn)
        try:
            entry["records"] = [info_json(i, base) for i in x64.chain(read, fn)]
        except DecodeError as exc:
            entry["problem"] = str(exc)
            problems.append("RuntimeFunction 0x%x: %s" % (base + fn.begin, exc))
        out.append(entry)
    return out


def opcode_json(op: arm64.Opcode) -> dict:
    return {"index": op.index, "bytes": op.raw.hex(), "name": op.name, "register": arm64.register(op),
            "operand": arm64.operand(op)}


def _xdata_json(read, rva: int, base: int) -> dict:
    x = arm64.read_xdata(read, rva)
    out = {"address": base + x.rva, "function_length": x.function_length, "version": x.version,
           "exception_data": x.has_exception_data, "epilogue_packed": x.epilogue_packed,
           "code_bytes": len(x.codes), "prologue": [opcode_json(op) for op in arm64.opcodes(x.codes)],
           "handler": base + x.handler if x.handler is not None else None}
    if x.epilogue_packed:
        out["epilogue_index"] = x.epilogue_count
        out["epilogue"] = [opcode_json(op) for op in arm64.opcodes(x.codes, x.epilogue_count)] \
            if x.epilogue_count < len(x.codes) else []
    else:
        out["epilogue_scopes"] = [{"offset": s.offset, "start_index": s.start_index,
                                   "opcodes": [opcode_json(op) for op in arm64.opcodes(x.codes, s.start_index)]}
                                  for s in x.scopes]
    return out


def _arm64_entries(read, headers: pe.PEHeaders, problems: List[str], base: int) -> List[dict]:
    out = []
    for e in arm64.read_entries(read, headers.exception_rva, headers.exception_size):
        entry = {"start": base + e.begin, "flag": e.flag.name}
        if e.packed is not None:
            p = e.packed
            entry["packed"] = {"function_length": p.function_length, "reg_f": p.reg_f, "reg_i": p.reg_i,
                               "homed": p.homed, "cr": int(p.cr), "cr_name": p.cr.name,
                               "frame_size": p.frame_size}
        elif e.xdata is None:
            entry["problem"] = "reserved Flag 3"
            problems.append("RuntimeFunction 0x%x: reserved Flag 3" % (base + e.begin))
        else:
            try:
                entry["xdata"] = _xdata_json(read, e.xdata, base)
            except DecodeError as exc:
                entry["problem"] = str(exc)
                problems.append("RuntimeFunction 0x%x: %s" % (base + e.begin, exc))
        out.append(entry)
    return out


def entries_json(read, headers: pe.PEHeaders, problems: List[str], base: int) -> List[dict]:
    """Every entry of the exception directory as JSON, addresses at an image loaded at base
    (the ImageBase for a file; where a loader mapped it in a process). Problems are appended."""
    if not headers.exception_rva:
        return []
    entries = _arm64_entries if headers.machine == pe.Machine.ARM64 else _x64_entries
    return entries(read, headers, problems, base)


def covers(entry: dict, address: int) -> bool:
    """Does an entry's function (its JSON) hold address? ARM64 entries end by their function length."""
    end = entry.get("end")
    if end is None:
        length = (entry.get("packed") or entry.get("xdata") or {}).get("function_length", 0)
        end = entry["start"] + length
    return entry["start"] <= address < end


def collect(path: str) -> Tuple[dict, List[str]]:
    """The file's .pdata as one source of `tables --json` ({"kind": "pdata", ...}), and its problems."""
    headers, read = _open(path)
    problems: List[str] = []
    source = {"kind": "pdata", "module": path.rsplit("/", 1)[-1], "section": ".pdata",
              "format": "PE32+", "machine": headers.machine.name, "image_base": headers.image_base,
              "address": headers.image_base + headers.exception_rva if headers.exception_rva else None,
              "entries": []}
    source["entries"] = entries_json(read, headers, problems, headers.image_base)
    return source, problems


def write_json(path: str, out: TextIO, address: Optional[int] = None) -> int:
    """{"sources": [the .pdata source], "problems": [...]}; exit status as write_text's.
    address: only the entry whose function holds it."""
    source, problems = collect(path)
    if address is not None:
        source["entries"] = [e for e in source["entries"] if covers(e, address)]
    json.dump({"sources": [source], "problems": problems}, out)
    out.write("\n")
    return 1 if problems else 0
