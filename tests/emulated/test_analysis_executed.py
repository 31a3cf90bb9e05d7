"""The instruction analysis against execution: i386, Arm and Thumb-2 code built by GCC, run in Unicorn.

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

Arm: the same program with tests/fixtures/analysis_run_arm.S (an IT-block
conditional return, vpush/vpop, stmdb/ldmia, `ldr pc, [sp], #4`, Arm
code's `ldmfdne sp!, {..., pc}` and r11 frame, interworking calls), built
with arm-linux-gnueabihf-gcc -mthumb and -marm at -O0, -O2, -O3 and -Os.
Control: with conditions ignored the conditional returns give wrong rows.

Clang (clang-16) builds of the same sources, i386 and Arm/Thumb-2 at -O0
and -O2, are held to the same check.
"""
import hashlib

import pytest

from emulated_analysis import file_reader, functions_of, run_checked
from support import FIXTURES, build, need_tool

from plugin.analysis import CodeAnalysis, arm, i386
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
    analysis = CodeAnalysis(BY_NAME["i386"], read, [(s, e) for s, e, _, _ in functions])
    [(start, end)] = [(s, e) for s, e, n, _ in functions if n == "pick"]
    result = analysis.function(start, end)
    indirect = [i for i in result.insns.values() if i.flow == Flow.INDIRECT]
    assert indirect and not result.unresolved and not result.assumed
    assert len([a for a in result.states if a > indirect[0].address]) >= 7 * 2   # the seven cases


@pytest.mark.parametrize("switch", ["PC_THUNKS", "CALLEE_POPS"])
def test_the_execution_oracle_sees_what_thunks_and_callee_pops_decide(switch, monkeypatch):
    monkeypatch.setattr(i386, switch, False)
    report = run_checked(program_i386("O2"), "i386", 3)
    assert report.wrong, "the oracle did not notice %s off" % switch


ARM_ASM = FIXTURES / "analysis_run_arm.S"
ARM_BUILDS = {"%s-%s" % (mode, level): ["-m" + mode, "-" + level]
              for mode in ("thumb", "arm") for level in ("O0", "O2", "O3", "Os")}
ARM_FUNCTIONS = FUNCTIONS | {"scaled", "early", "asm_shapes", "it_return", "ldr_pc", "ldr_pc_arm", "leaf_thumb"}


def program_arm(name):
    digest = hashlib.sha256(ARM_ASM.read_bytes()).hexdigest()[:8]
    return build("analysis_run.c", [*ARM_BUILDS[name], *FREESTANDING[:-2], str(ARM_ASM), "-e", "run", "-lgcc"],
                 name="analysis_run-arm-" + digest, compiler=need_tool("arm-linux-gnueabihf-gcc"))


@pytest.mark.parametrize("name", sorted(ARM_BUILDS))
@pytest.mark.parametrize("argument", [0, 3])
def test_every_executed_arm_and_thumb_instruction_has_the_real_frame(name, argument):
    report = run_checked(program_arm(name), "arm", argument)
    assert report.wrong == [], report.wrong[:10]
    assert report.undecided == [], report.undecided[:10]
    assert report.checked >= 500
    named = {n.split(".")[0] for n in report.functions}
    assert ARM_FUNCTIONS <= named, ARM_FUNCTIONS - named
    rules = {text for function, text in report.rules if function == "it_return"}
    assert "CFA=r7+8 => r4=[CFA-12] r7=[CFA-8] lr=[CFA-4]" in rules or \
        "CFA=sp+12 => r4=[CFA-12] r7=[CFA-8] lr=[CFA-4]" in rules, rules


def test_the_execution_oracle_sees_conditional_returns(monkeypatch):
    original = arm.split_mnemonic
    monkeypatch.setattr(arm, "split_mnemonic", lambda mnemonic: original(mnemonic)[:1] + (None, False))
    report = run_checked(program_arm("thumb-O2"), "arm", 3)
    assert report.wrong or report.undecided


CLANG_BUILDS = {"i386-O0": ("i386", ["-m32", "-O0"]), "i386-O2": ("i386", ["-m32", "-O2"]),
                "thumb-O0": ("arm", ["-mthumb", "-O0"]), "thumb-O2": ("arm", ["-mthumb", "-O2"]),
                "arm-O0": ("arm", ["-marm", "-O0"]), "arm-O2": ("arm", ["-marm", "-O2"])}


def program_clang(name):
    arch, flags = CLANG_BUILDS[name]
    common = ["-ffreestanding", "-fno-stack-protector", "-nostdlib", "-static", "-Wl,-e,run"]
    if arch == "arm":
        digest = hashlib.sha256(ARM_ASM.read_bytes()).hexdigest()[:8]
        # cortex-a15 divides in hardware: no libgcc helper to link
        flags = ["--target=armv7a-linux-gnueabihf", "-mcpu=cortex-a15", *flags, *common,
                 "-fuse-ld=" + need_tool("arm-linux-gnueabihf-ld"), str(ARM_ASM)]
        return arch, build("analysis_run.c", flags, name="analysis_run-clang-arm-" + digest,
                           compiler=need_tool("clang-16"))
    return arch, build("analysis_run.c", [*flags, *common], name="analysis_run-clang-i386",
                       compiler=need_tool("clang-16"))


@pytest.mark.parametrize("name", sorted(CLANG_BUILDS))
def test_every_executed_instruction_of_clang_code_has_the_real_frame(name):
    arch, path = program_clang(name)
    report = run_checked(path, arch, 3)
    assert report.wrong == [], report.wrong[:10]
    assert report.undecided == [], report.undecided[:10]
    assert report.checked >= 500
    assert FUNCTIONS <= {n.split(".")[0] for n in report.functions}
