"""Mutation fuzz over every path from bytes to output, one target per source of bytes.

    python3 tests/realworld/fuzz_targets.py [--executions N | --seconds S] [--seed 1] [TARGET...]

Each target takes seeds (real files of x86_64, aarch64, armhf, i386 and s390x,
built here or read from the oracle corpus, or bare sections from it), mutates
the bytes it is about (fuzz_offline.mutate: bit flips, random bytes, boundary
values, truncation, growth) and runs what fuzz_paths.py runs on them, each
input in a forked child with fuzz_offline's limits (memory, time):

    eh_frame, eh_frame_hdr   .eh_frame / .eh_frame_hdr of whole ELF files
    debug_frame              .debug_frame (read from the file on disk)
    debug_frame_zlib         SHF_COMPRESSED .debug_frame: its content mutated and
                             compressed again, or its compressed bytes
    sframe                   .sframe of whole ELF files (x86-64, AArch64, s390x)
    exidx                    .ARM.exidx and .ARM.extab (Thumb and Arm builds, an Android library)
    elf_headers              ELF, program and section headers, symbol and string tables
    macho                    Mach-O load commands, __unwind_info and __eh_frame
    validate                 whole files through `validate` as well as `tables`
    dwarf_expr               bare DWARF expressions: evaluated, disassembled, spelled
    sframe_section           bare .sframe sections (libsframe's test data, v1 to v3)
    unwind_info_section      bare __unwind_info sections

Whole files go through `tables` (text, JSON, at an address), a walk from fake
registers over a fake stack, every frame explained (text, JSON) and the rows
at those pcs evaluated. Prints, per target, the executions, outcomes and
findings (exceptions escaping an entry point documented not to raise them,
JSON that does not parse, inputs over the time limit or killed).

A source added later is dumped through render/tables.iter_sources and walked
through the engine, so the file targets reach it once their seeds hold its
table: give it a target (its section names and seeds) in targets(), and its
bare decoder an exercise_* in fuzz_paths.py.
"""
from __future__ import annotations

import argparse
import bz2
import glob
import os
import random
import struct
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests" / "helpers", Path(__file__).resolve().parent):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import fuzz_offline  # noqa: E402
import fuzz_paths  # noqa: E402

ORACLES = Path(os.environ.get("UNWIND_ORACLES", ROOT.parent / "shared" / "oracles"))
TABLE_SEGMENTS = (0x70000001, 0x6474E550, 0x6474E554)      # PT_ARM_EXIDX, PT_GNU_EH_FRAME, PT_GNU_SFRAME
ELF_HEADERS = (".symtab", ".strtab", ".dynsym", ".dynstr", ".shstrtab")
# A few real DWARF expressions: the x86-64 PLT's CFA (every x86-64 .eh_frame has it),
# a saved-register address as the kernel's signal frames give them, a branch.
EXPRESSIONS = tuple(bytes.fromhex(h) for h in (
    "770880003f1a3b2a332422",           # rsp+8 + ((rip & 15) >= 11) << 3: the PLT's CFA
    "77a00106",                         # *(rsp+160)
    "770880003f1a3b2a280300",           # a branch
    "9c2310",                           # DW_OP_call_frame_cfa; plus_uconst 16
    "f11b10000000",                     # DW_OP_GNU_encoded_addr pcrel|sdata4
    "7600063822"))                      # *(rbp)+8


@dataclass
class Seed:
    name: str
    data: bytes
    ranges: list                # [(offset, size)]: where the target's mutations go
    zlib_section: tuple = ()    # (header offset, sh_offset, sh_size, is64): a compressed .debug_frame


@dataclass
class Target:
    name: str
    seeds: list
    kind: str = "file"          # "file", "validate", "expression", "sframe", "unwind_info"
    stats: Counter = field(default_factory=Counter)


# -- seeds ---------------------------------------------------------------------

def elf_ranges(data: bytes, names) -> tuple:
    """([(offset, size)] of the named sections (or, for "headers", of the ELF structures),
    the compressed .debug_frame's (header offset, sh_offset, sh_size, is64) or ())."""
    import io
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    ranges, zlib_section = [], ()
    if "headers" in names:
        ranges += [(0, elf["e_ehsize"]), (elf["e_phoff"], elf["e_phentsize"] * elf["e_phnum"]),
                   (elf["e_shoff"], elf["e_shentsize"] * elf["e_shnum"])]
    for i, sec in enumerate(elf.iter_sections()):
        if sec.name in names and sec["sh_type"] != "SHT_NOBITS":
            ranges.append((sec["sh_offset"], sec["sh_size"]))
            if sec["sh_flags"] & 0x800:         # SHF_COMPRESSED
                zlib_section = (elf["e_shoff"] + i * elf["e_shentsize"], sec["sh_offset"], sec["sh_size"],
                                elf.elfclass == 64)
    return [(o, s) for o, s in ranges if s > 0 and o + s <= len(data)], zlib_section


def macho_ranges(data: bytes) -> list:
    from plugin.formats import macho as mf
    from plugin.memory import Region
    region = Region.from_bytes("macho", 0, data)
    slices = mf.fat_slices(region)
    image = mf.open_slice(region, slices[0]) if slices else mf.MachO(region)
    base = slices[0].offset if slices else 0
    ranges = [(base, image.header_size + image.sizeofcmds)]
    for seg in image.segments:
        for sec in seg.sections:
            if sec.sectname in ("__unwind_info", "__eh_frame") and sec.offset:
                ranges.append((base + sec.offset, sec.size))
    return ranges


def built_programs() -> dict:
    """{label: path} of the programs built here for the seeds (support.build caches them)."""
    import hostile_files
    from support import build, need_tool
    df = ["-O1", "-fno-asynchronous-unwind-tables"]
    zlib_post = [["objcopy", "--compress-debug-sections=zlib", "{out}"]]
    out = {
        "x86_64": build("chain.c", ["-O2"]),
        "x86_64-sframe": hostile_files.sframe_program(),
        "x86_64-debug_frame": build("chain.c", df, name="chain-df"),
        "x86_64-debug_frame-zlib": build("chain.c", df, post=zlib_post, name="chain-df-zlib"),
        "i386": build("chain.c", ["-m32", "-O2"], name="chain-i386"),
        "i386-debug_frame": build("chain.c", ["-m32", *df], name="chain-i386-df"),
        "armhf-thumb": hostile_files.thumb_program(),
        "armhf-arm": build("ehabi.cpp", ["-marm", "-O2", "-funwind-tables"], name="ehabi-arm-dyn",
                           compiler="arm-linux-gnueabihf-g++"),
    }
    need_tool("aarch64-linux-gnu-gcc")
    out["aarch64"] = build("chain.c", ["-O2"], name="chain-aarch64", compiler="aarch64-linux-gnu-gcc")
    return out


def oracle_files() -> dict:
    """{label: bytes} of the corpus' real files used as seeds."""
    sframe_s390x = ORACLES / "binutils-2.46.0/binutils/testsuite/binutils-all/s390/test-v2-ET_EXEC.sframe.bz2"
    out = {"s390x": bz2.decompress(sframe_s390x.read_bytes()),
           "aarch64-sframe": (ORACLES / "sframe-v3-demo/sframe_demo_aarch64").read_bytes(),
           "armhf-android": (ORACLES / "framehop/fixtures/android/arm/release-libmozglue.so").read_bytes(),
           "aarch64-vdso": (ORACLES / "framehop/fixtures/linux/aarch64/vdso.so").read_bytes()}
    for path in sorted(glob.glob(str(ORACLES / "llvm-project-16.0.4/llvm/test/tools/llvm-objdump/MachO/Inputs/*"))):
        out["macho-" + os.path.basename(path)] = Path(path).read_bytes()
    out["macho-firefox"] = (ORACLES / "framehop/fixtures/macos/x86_64/nofp/firefox-esr-78").read_bytes()
    return out


def bare_sections(pattern_list) -> list:
    return [Path(p) for pattern in pattern_list for p in sorted(glob.glob(str(ORACLES / pattern)))]


def targets() -> dict:
    """{name: Target}, with their seeds."""
    built = {label: Path(path).read_bytes() for label, path in built_programs().items()}
    corpus = oracle_files()
    files = dict(built, **{k: v for k, v in corpus.items() if not k.startswith("macho-")})

    def elf_seeds(labels, names):
        seeds = []
        for label in labels:
            ranges, zsec = elf_ranges(files[label], names)
            if ranges:
                seeds.append(Seed(label, files[label], ranges, zsec))
        return seeds

    elves = sorted(files)
    found = {
        "eh_frame": Target("eh_frame", elf_seeds(["x86_64", "i386", "aarch64", "s390x", "armhf-thumb"],
                                                 (".eh_frame",))),
        "eh_frame_hdr": Target("eh_frame_hdr", elf_seeds(["x86_64", "i386", "aarch64", "s390x"],
                                                         (".eh_frame_hdr",))),
        "debug_frame": Target("debug_frame", elf_seeds(["x86_64-debug_frame", "i386-debug_frame",
                                                        "armhf-thumb"], (".debug_frame",))),
        "debug_frame_zlib": Target("debug_frame_zlib", elf_seeds(["x86_64-debug_frame-zlib"], (".debug_frame",))),
        "sframe": Target("sframe", elf_seeds(["x86_64-sframe", "aarch64-sframe", "s390x"], (".sframe",))),
        "exidx": Target("exidx", elf_seeds(["armhf-thumb", "armhf-arm", "armhf-android"],
                                           (".ARM.exidx", ".ARM.extab"))),
        "elf_headers": Target("elf_headers", elf_seeds(elves, ("headers",) + ELF_HEADERS)),
        "macho": Target("macho", [Seed(k, v, macho_ranges(v)) for k, v in sorted(corpus.items())
                                  if k.startswith("macho-")]),
        "validate": Target("validate", elf_seeds(["x86_64", "aarch64", "x86_64-sframe"],
                                                 ("headers", ".eh_frame", ".sframe", ".eh_frame_hdr", ".text")),
                           kind="validate"),
        "dwarf_expr": Target("dwarf_expr", [Seed("expr%d" % i, e, [(0, len(e))]) for i, e in enumerate(EXPRESSIONS)],
                             kind="expression"),
        "sframe_section": Target("sframe_section", [
            Seed(p.parent.parent.parent.parent.name + "/" + p.name, p.read_bytes(), [(0, p.stat().st_size)])
            for p in bare_sections(["binutils-2.46.0/libsframe/testsuite/libsframe.decode/DATA*",
                                    "binutils-gdb-oracle-mirror-v1/libsframe/testsuite/libsframe.decode/DATA*"])],
            kind="sframe"),
        "unwind_info_section": Target("unwind_info_section", [
            Seed(p.name, p.read_bytes(), [(0, p.stat().st_size)])
            for p in bare_sections(["framehop/fixtures/macos/*/*/*.__unwind_info"])], kind="unwind_info"),
    }
    return found


# -- mutations -----------------------------------------------------------------

def mutated(rng: random.Random, seed: Seed) -> bytes:
    """The seed with a few mutations, most of them in its ranges; a compressed section
    is mutated as its content half the time, then compressed again."""
    if seed.zlib_section and rng.random() < 0.5:
        return recompressed(rng, seed)
    if seed.data[:4] == b"\x7fELF" and rng.random() < 0.1:
        return shrunk_segment(rng, seed.data)
    hot = seed.ranges if rng.random() < 0.9 else []
    out = fuzz_offline.mutate(rng, seed.data, hot)
    if hot and rng.random() < 0.8:      # most inputs keep their length: the layout stays, decoders are reached
        out = out[:len(seed.data)] + seed.data[len(out):]
    return out


def shrunk_segment(rng: random.Random, data: bytes) -> bytes:
    """One program header's file and memory sizes made a few table entries (8 bytes
    each) smaller: a table segment that ends early, its last entries cut off."""
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    phoff, = struct.unpack_from(order + ("Q" if is64 else "I"), data, 0x20 if is64 else 0x1C)
    phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36 if is64 else 0x2A)
    if not phnum or phoff + phnum * phentsize > len(data):
        return data
    headers = [phoff + i * phentsize for i in range(phnum)]
    tables = [h for h in headers if struct.unpack_from(order + "I", data, h)[0] in TABLE_SEGMENTS]
    chosen = rng.choice(tables if tables and rng.random() < 0.7 else headers)
    at = chosen + (32 if is64 else 16)      # p_filesz, then p_memsz
    word = order + ("QQ" if is64 else "II")
    filesz, memsz = struct.unpack_from(word, data, at)
    cut = 8 * rng.randrange(1, 7)
    out = bytearray(data)
    struct.pack_into(word, out, at, max(0, filesz - cut), max(0, memsz - cut))
    return bytes(out)


def recompressed(rng: random.Random, seed: Seed) -> bytes:
    """The compressed section's content mutated and compressed again, placed at the end of
    the file (sh_offset, sh_size and the compression header's ch_size follow it)."""
    header_at, offset, size, is64 = seed.zlib_section
    chdr = struct.Struct("<IIQQ" if is64 else "<III")
    fields = chdr.unpack_from(seed.data, offset)
    content = zlib.decompress(seed.data[offset + chdr.size:offset + size])
    content = fuzz_offline.mutate(rng, content, [(0, len(content))])
    ch_size = len(content) if rng.random() < 0.9 else rng.choice(fuzz_offline.BOUNDARY) & 0xFFFFFFFF
    new_header = chdr.pack(fields[0], 0, ch_size, fields[-1]) if is64 else chdr.pack(fields[0], ch_size, fields[-1])
    section = new_header + zlib.compress(content)
    out = bytearray(seed.data)
    at = len(out) + (-len(out) % 8)
    out += bytes(at - len(out)) + section
    if is64:        # Elf64_Shdr: sh_offset at 24, sh_size at 32
        struct.pack_into("<QQ", out, header_at + 24, at, len(section))
    else:           # Elf32_Shdr: sh_offset at 16, sh_size at 20
        struct.pack_into("<II", out, header_at + 16, at, len(section))
    return bytes(out)


# -- the driver ----------------------------------------------------------------

def job_for(target: Target, data: bytes, job_seed: int, directory: str, serial: int):
    """What the forked child runs for one input; returns the outcome's label."""
    rng = random.Random(job_seed)
    if target.kind == "expression":
        return lambda: fuzz_paths.exercise_expression(data, rng)
    if target.kind == "sframe":
        return lambda: fuzz_paths.exercise_sframe(data, rng)
    if target.kind == "unwind_info":
        return lambda: fuzz_paths.exercise_unwind_info(data, rng)
    path = os.path.join(directory, "input-%d" % serial)     # a new name: no cache keyed by path is stale

    def run_file():
        with open(path, "wb") as handle:
            handle.write(data)
        return fuzz_paths.exercise_file(path, rng, validate=target.kind == "validate")
    return run_file


def fuzz_target(target: Target, executions: int, seconds: float, seed: int, save=None) -> dict:
    """Run `executions` inputs (or, with executions 0, for `seconds`) against target."""
    import plugin.__main__  # noqa: F401  (imported once, before forking)
    import plugin.render.tables  # noqa: F401
    rng = random.Random("%s/%d" % (target.name, seed))
    findings, outcomes = {}, Counter()
    slowest, count = 0.0, 0
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as directory:
        while (count < executions) if executions else (time.monotonic() < deadline):
            chosen = rng.choice(target.seeds)
            data = mutated(rng, chosen)
            message, took, _ = fuzz_offline.execute_job(job_for(target, data, rng.getrandbits(32), directory,
                                                                count))
            for leftover in glob.glob(os.path.join(directory, "input-*")):
                os.unlink(leftover)
            count += 1
            slowest = max(slowest, took)
            bad = message.startswith(("EXC", "DIED")) or took > fuzz_offline.TIME_LIMIT
            label = message.split(" at ")[0] if message.startswith("EXC") else message
            outcomes[label if not bad else "FINDING"] += 1
            if bad:
                key = message if took <= fuzz_offline.TIME_LIMIT else "SLOW %.1f s" % took
                if key not in findings:
                    findings[key] = chosen.name
                    if save:
                        Path(save).mkdir(parents=True, exist_ok=True)
                        (Path(save) / ("%s-%d" % (target.name, len(findings)))).write_bytes(data)
    return {"target": target.name, "executions": count, "seeds": [s.name for s in target.seeds],
            "outcomes": dict(outcomes), "findings": findings, "slowest_seconds": round(slowest, 2)}


def report(summaries, out=sys.stdout) -> None:
    for s in summaries:
        out.write("%-20s %6d executions, %d findings, slowest %.2f s, seeds: %s\n" % (
            s["target"], s["executions"], len(s["findings"]), s["slowest_seconds"], ", ".join(s["seeds"])))
        for label, count in Counter(s["outcomes"]).most_common(6):
            out.write("      %6d  %s\n" % (count, label[:150]))
        for key, seed in sorted(s["findings"].items()):
            out.write("    FINDING (seed %s): %s\n" % (seed, key))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET")
    parser.add_argument("--executions", type=int, default=0, help="inputs per target (default: --seconds)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", metavar="DIR", help="keep each finding's input here")
    args = parser.parse_args(argv)
    every = targets()
    chosen = args.targets or list(every)
    summaries = [fuzz_target(every[name], args.executions, args.seconds, args.seed, args.save) for name in chosen]
    report(summaries)
    return 1 if any(s["findings"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
