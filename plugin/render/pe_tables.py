"""`python -m plugin tables FILE` for a PE file: every .pdata entry with its
x64 UNWIND_INFO and unwind codes, in substance as `llvm-readobj --unwind`
prints them. (ARM64 .pdata is not decoded yet: said so in one line.)"""
from __future__ import annotations

from typing import TextIO

from plugin.errors import DecodeError
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


def write_text(path: str, out: TextIO) -> int:
    """Exit status: 0 every entry decoded, 1 some not (each said), DecodeError if none can be."""
    with open(path, "rb") as f:
        data = f.read()
    read = pe.file_reader(data)
    headers = pe.read_headers(read)
    out.write("File: %s\nFormat: PE32+ %s\nImageBase: 0x%x\n"
              % (path, headers.machine.name, headers.image_base))
    if not headers.exception_rva:
        out.write("no exception directory (.pdata): no unwind data\n")
        return 0
    rva_read = pe.rva_reader(read, headers, "file")
    if headers.machine != pe.Machine.AMD64:
        out.write("ARM64 .pdata (%d bytes at RVA 0x%x) is not decoded yet\n"
                  % (headers.exception_size, headers.exception_rva))
        return 1
    status = 0
    base = headers.image_base
    for fn in x64.read_runtime_functions(rva_read, headers.exception_rva, headers.exception_size):
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
