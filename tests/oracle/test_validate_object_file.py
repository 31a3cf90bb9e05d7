"""`python -m plugin validate` on relocatable objects (`.o`): the code a table describes, not address 0.

An object's CFI reaches its code only through relocations; before its
sections were laid out and its CFI relocated (plugin/file_targets/object_layout.py),
every FDE was read at the address of its own pc_begin field, and the
correct twin of the planted fixture got 14 wrong rows. Oracles: the
assembler's bad_N labels (nm of the object: section-relative, and `.text` is
placed first, at 0) and objdump's instruction list, exactly as for the linked
fixture (test_validate_planted.py); the linked program's counts for the same
code; readelf's relocated FDE ranges for a -ffunction-sections object.
"""

import re
import subprocess

from support import build, need_tool
from validate_support import PLANTED, instructions, planted_ranges, validate, wrong


def test_planted_errors_are_found_in_the_object_exactly_as_in_the_linked_file():
    obj = build(PLANTED, ["-c"], name="validate_planted_object")
    linked = build(PLANTED, ["-shared", "-nostdlib"], name="validate_planted_linked")
    report = validate(obj)
    assert wrong(report, "cfi") == planted_ranges(obj, (1, 2, 3, 4))
    assert len(wrong(report, "cfi")) == 15
    # every instruction objdump finds in the object is checked, as in the linked file
    tally = report["sources"]["cfi"]
    assert tally["right"] + tally["wrong"] + tally["unknown"] == len(instructions(obj)) == report["instructions"]
    assert wrong(validate(linked), "cfi") == planted_ranges(linked, (1, 2, 3, 4))


def test_the_correct_twin_object_has_no_disagreement():
    report = validate(build(PLANTED, ["-c", "-DCORRECT"], name="validate_planted_object_correct"))
    assert report["disagreements"] == [] and report["unknown"] == 0
    assert report["sources"]["cfi"]["right"] >= 45


def test_functions_in_sections_of_their_own_are_placed_apart_and_checked(tmp_path):
    """-ffunction-sections: each FDE is relocated against its own .text.NAME; every function is
    checked at its own code, for x86_64, i386, aarch64 (.eh_frame) and with -g (.debug_frame)."""
    source = tmp_path / "two.c"
    source.write_text("int f(int x) { return x * 3 + 1; }\nint g(int x) { return f(x) - f(x + 1); }\n")
    builds = {"x86_64": ("gcc", []), "i386": ("gcc", ["-m32"]), "aarch64": ("aarch64-linux-gnu-gcc", []),
              "debug_frame": ("gcc", ["-g", "-fno-asynchronous-unwind-tables"])}
    for name, (compiler, flags) in builds.items():
        obj = tmp_path / (name + ".o")
        subprocess.run([need_tool(compiler), "-O0", "-ffunction-sections", *flags, "-c", str(source), "-o", str(obj)],
                       check=True)
        readelf = "aarch64-linux-gnu-readelf" if name == "aarch64" else "readelf"
        frames = subprocess.run([need_tool(readelf), "-wf", str(obj)], capture_output=True, text=True).stdout
        fdes = len(re.findall(r" FDE ", frames))
        assert fdes >= 2, frames         # f, g (i386: and its pc thunk)
        report = validate(obj)
        assert report["functions"] == fdes and report["disagreements"] == [], (name, report["disagreements"])
        assert report["sources"]["cfi"]["right"] >= 10 and report["unknown"] == 0, name
