"""The instruction analysis against execution: i386 code built by GCC, run in Unicorn.

tests/fixtures/analysis_run.c is built freestanding with `gcc -m32` at -O0,
-O2 (position-independent, GCC's default here: pc thunks and GOT-relative
jump tables), -O2 -fno-pie (absolute jump tables), -O2 with a frame
pointer, -Os and -O3, and `run` is executed in Unicorn
(tests/helpers/emulated_analysis.py). At every instruction executed in a
function the analysis's row, applied to the real registers and stack,
must give the real CFA and the caller's return address and callee-saved
registers; no executed instruction may be left undecided. Controls: the
same check with the pc-thunk or the callee-pops knowledge switched off
finds wrong rows, so the oracle sees what those parts decide.
"""

import pytest

from emulated_analysis import file_reader, functions_of, run_checked
from support import build, need_tool

from plugin.analysis import CodeAnalysis, i386
from plugin.analysis.ops import Flow
from plugin.arch import BY_NAME

FREESTANDING = ["-ffreestanding", "-fno-stack-protector", "-nostdlib", "-static", "-no-pie", "-e", "run"]
BUILDS_I386 = {"O0": ["-O0"], "O2": ["-O2"], "O2-nopie": ["-O2", "-fno-pie"],
               "O2-fp": ["-O2", "-fno-omit-frame-pointer"], "Os": ["-Os"], "O3": ["-O3"]}
FUNCTIONS = {"run", "make", "use_make", "pick", "with_alloca", "aligned", "fact", "many", "through_pointers",
             "twice", "thrice"}


def program_i386(name):
    return build("analysis_run.c", ["-m32", *BUILDS_I386[name], *FREESTANDING], name="analysis_run-i386",
                 compiler=need_tool("gcc"))


@pytest.mark.parametrize("name", sorted(BUILDS_I386))
@pytest.mark.parametrize("argument", [0, 3])
def test_every_executed_i386_instruction_has_the_real_frame(name, argument):
    report = run_checked(program_i386(name), "i386", argument)
    assert report.wrong == [], report.wrong[:10]
    assert report.undecided == [], report.undecided[:10]
    assert report.checked >= 300
    named = {n.split(".")[0] for n in report.functions}
    assert FUNCTIONS <= named, FUNCTIONS - named


@pytest.mark.parametrize("name", ["O2", "O2-nopie", "Os"])
def test_i386_jump_tables_are_read_not_assumed(name):
    path = program_i386(name)
    functions = functions_of(path)
    read = file_reader(path)
    analysis = CodeAnalysis(BY_NAME["i386"], read, [(s, e) for s, e, _ in functions])
    [(start, end)] = [(s, e) for s, e, n in functions if n == "pick"]
    result = analysis.function(start, end)
    indirect = [i for i in result.insns.values() if i.flow == Flow.INDIRECT]
    assert indirect and not result.unresolved and not result.assumed
    assert len([a for a in result.states if a > indirect[0].address]) >= 7 * 2   # the seven cases


@pytest.mark.parametrize("switch", ["PC_THUNKS", "CALLEE_POPS"])
def test_the_execution_oracle_sees_what_thunks_and_callee_pops_decide(switch, monkeypatch):
    monkeypatch.setattr(i386, switch, False)
    report = run_checked(program_i386("O2"), "i386", 3)
    assert report.wrong, "the oracle did not notice %s off" % switch
