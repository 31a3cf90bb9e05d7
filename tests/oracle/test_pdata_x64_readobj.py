"""x64 .pdata/.xdata decoded by plugin.formats.pdata_x64 equal llvm-readobj-16 --unwind's
entries field by field, on clang-built images (C at -O0 and -O2, an executable and a DLL)
and hand-written .seh_* assembly (SAVE_NONVOL(_FAR), SAVE_XMM128, SET_FPREG, ALLOC_LARGE's
two forms, a handler) and a hand-written chained record and PUSH_MACHFRAME."""
from __future__ import annotations

import pytest

from plugin.formats import pdata_x64 as x64
from plugin.formats import pe
from plugin.render.pe_tables import describe_code
from pe_images import build, readobj_x64

IMAGES = [("x64_funcs.c", "-O0", False), ("x64_funcs.c", "-O2", False),
          ("x64_funcs.c", "-O2", True), ("x64_codes.s", "-O0", False),
          ("x64_chained.s", "-O0", False)]


def _ours(path):
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    functions = x64.read_runtime_functions(read, headers.exception_rva, headers.exception_size)
    return headers, [(fn, x64.chain(read, fn)) for fn in functions]


def _readobj_code_text(text):
    """llvm-readobj's code line in our spelling: its offsets are hex, ours too."""
    return text.replace("offset=0x", "offset=0x").lower()


@pytest.mark.parametrize("source,opt,dll", IMAGES)
def test_every_field_equals_llvm_readobj(tmp_path, source, opt, dll):
    path = build(source, str(tmp_path), opt=opt, dll=dll)
    headers, ours = _ours(path)
    theirs = readobj_x64(path)
    assert headers.machine == pe.Machine.AMD64
    assert len(ours) == len(theirs) > 0
    base = headers.image_base
    for (fn, infos), want in zip(ours, theirs):
        assert (base + fn.begin, base + fn.end, base + fn.unwind_info) == \
            (want["StartAddress"], want["EndAddress"], want["UnwindInfoAddress"])
        info, w = infos[0], want["infos"][0]          # readobj prints the first record
        assert (info.version, int(info.flags), info.prolog_size, info.frame_register,
                info.frame_offset, sum(c.slots for c in info.codes)) == \
            (w["version"], w["flags"], w["prolog"], w["frame_register"],
             w["frame_offset_field"] * 16, w["count"])
        ours_codes = [(c.offset, describe_code(c, info).split(": ", 1)[1].lower())
                      for c in info.codes]
        want_codes = [(o, _readobj_code_text(t)) for o, t in w["codes"]]
        assert ours_codes == want_codes
        if info.chained is not None:
            c = info.chained
            assert [base + c.begin, base + c.end, base + c.unwind_info] == w["chained"]
            assert len(infos) == 2
        else:
            assert w["chained"] is None and len(infos) == 1
        if info.handler is not None:
            assert base + info.handler == w["handler"]


def test_the_assembly_covers_every_prolog_code(tmp_path):
    """The fixtures hold each code the evaluation reads, so the comparison above meant them."""
    ops = set()
    for source in ("x64_codes.s", "x64_chained.s"):
        _, ours = _ours(build(source, str(tmp_path)))
        ops |= {c.op for _, infos in ours for info in infos for c in info.codes}
        ops |= {("chained",) for _, infos in ours if len(infos) > 1}
    want = {x64.Op.PUSH_NONVOL, x64.Op.ALLOC_LARGE, x64.Op.ALLOC_SMALL, x64.Op.SET_FPREG,
            x64.Op.SAVE_NONVOL, x64.Op.SAVE_NONVOL_FAR, x64.Op.SAVE_XMM128, x64.Op.SAVE_XMM128_FAR,
            x64.Op.PUSH_MACHFRAME, ("chained",)}
    assert want <= ops
