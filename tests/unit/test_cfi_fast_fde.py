"""The usual FDE read straight from the section's bytes (EntryDecoder._common_fde)
equals the same FDE read field by field, on real libraries nobody here wrote,
and entries outside the usual case are left to the field-by-field reader."""

import pytest

from plugin.formats.cfi import entries
from plugin.modules import ModuleMap
from plugin.strategies.cfi import CfiTables
from plugin.file_targets import open_file
from support import system_library

FIELDS = ("offset", "length", "is_64", "start", "end", "lsda", "instructions_offset", "instructions")


def eh_frame(path):
    target = open_file(str(path))
    (module,) = ModuleMap(target).all()
    section = CfiTables.of(module, target).eh_frame()
    section.region.prefetch()
    return section


@pytest.mark.parametrize("name", ["libc.so.6", "libstdc++.so.6"])
def test_fast_and_field_by_field_fdes_are_equal(name):
    section = eh_frame(system_library(name))
    fast = slow = 0
    for entry in section.walk(keep=False):
        if not isinstance(entry, entries.FDE):
            continue
        header = section._header(entry.offset)
        quick = section._common_fde(header, entry.cie)
        section._common_fde = lambda header, cie: None          # the field-by-field reader only
        reference = section._fde(header, keep=False)
        del section._common_fde
        for field in FIELDS:
            assert getattr(entry, field) == getattr(reference, field), (field, entry.offset)
            if quick is not None:
                assert getattr(quick, field) == getattr(reference, field), (field, entry.offset)
        fast += quick is not None
        slow += quick is None
    assert fast > 1000        # nearly every FDE of a C or C++ library is the usual case
    if name == "libstdc++.so.6":
        assert slow > 100     # FDEs with an LSDA: read field by field
