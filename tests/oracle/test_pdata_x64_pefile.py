"""x64 unwind records decoded by plugin.formats.pdata_x64 equal pefile's (a second decoder
the project did not write): header fields, each code's prolog offset, operation and size or
offset, the handler and the chained entry."""
from __future__ import annotations

import re

import pefile
import pytest

from pe_images import build

from plugin.formats import pdata_x64 as x64
from plugin.formats import pe

IMAGES = [("x64_funcs.c", "-O0"), ("x64_funcs.c", "-O2"), ("x64_codes.s", "-O0"),
          ("x64_chained.s", "-O0")]


@pytest.mark.parametrize("source,opt", IMAGES)
def test_records_equal_pefile(tmp_path, source, opt):
    path = build(source, str(tmp_path), opt=opt)
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    ours = x64.read_runtime_functions(read, headers.exception_rva, headers.exception_size)
    theirs = pefile.PE(path).DIRECTORY_ENTRY_EXCEPTION
    assert len(ours) == len(theirs) > 0
    for fn, entry in zip(ours, theirs):
        s, u = entry.struct, entry.unwindinfo
        assert (fn.begin, fn.end, fn.unwind_info) == (s.BeginAddress, s.EndAddress, s.UnwindData)
        info = x64.read_unwind_info(read, fn.unwind_info)
        assert (info.version, int(info.flags), info.prolog_size, info.frame_register,
                info.frame_offset, sum(c.slots for c in info.codes)) == \
            (u.Version, u.Flags, u.SizeOfProlog, u.FrameRegister, u.FrameOffset * 16,
             u.CountOfCodes)
        assert [(c.offset, int(c.op)) for c in info.codes] == \
            [(c.struct.CodeOffset, c.struct.UnwindOp) for c in u.UnwindCodes]
        for c, theirs_code in zip(info.codes, u.UnwindCodes):
            number = re.search(r"0x([0-9a-f]+)$", str(theirs_code))
            if number and c.op != x64.Op.SET_FPREG:
                assert c.operand == int(number.group(1), 16)
        if info.handler is not None:
            assert info.handler == u.ExceptionHandler
        if info.chained is not None:
            f = u.get_chained_function_entry().struct
            assert (info.chained.begin, info.chained.end, info.chained.unwind_info) == \
                (f.BeginAddress, f.EndAddress, f.UnwindData)
