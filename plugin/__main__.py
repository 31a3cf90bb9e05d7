"""Offline command line: `python -m plugin tables FILE... [--address ADDR] [--json] [--arch ARCH]`,
and `python -m plugin gdbinit|lldbinit [--append]` (the line that loads the plugin).

The file is laid out in memory as the loader would (FileTarget), so the
tables printed here come through the same discovery and decoders as in a
live debugger. Errors are one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

from plugin.commands.spec import OPTIONS, Debugger, convert
from plugin.errors import bad_file_errors


_PACKAGES = {"elftools": "pyelftools"}     # import name -> the package pip installs it with
LLDB_STYLE = Debugger.LLDB       # `--json`, `--sources LIST`: the offline command spells options as LLDB does


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def parse_address(text):
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError("not an address: %r (use 0x1234 or 4660)" % text) from None


def build_parser():
    parser = OneLineParser(prog="python -m plugin",
                           description="Decode and explain the unwind tables of a file.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    t = sub.add_parser("tables", help="print every unwind table entry and row in FILE",
                       description="Print every unwind table entry and row found in FILE "
                                   "(or only those covering ADDR). Several FILEs are read in one "
                                   "process, each under a 'File: FILE' heading; the exit status "
                                   "is the worst of theirs. --json takes one FILE.")
    t.add_argument("file", metavar="FILE", nargs="+")
    t.add_argument("--address", type=parse_address, metavar="ADDR",
                   help="only the entries and rows covering this link-time address")
    t.add_argument(OPTIONS["json"].spelled(LLDB_STYLE), action="store_true", help=OPTIONS["json"].help)
    t.add_argument("--arch", metavar="ARCH",
                   help="the slice of a universal (fat) Mach-O file to read: x86_64, arm64 or i386 "
                        "(default: the first slice)")
    sources = OPTIONS["sources"]
    t.add_argument(sources.spelled(LLDB_STYLE), type=parse_source_list, metavar=sources.metavar,
                   help="only these sources' tables: %s (frame-pointer and scan read a live stack "
                        "and have no tables)" % sources.help)
    v = sub.add_parser("validate", help="check the unwind tables of FILE against its instructions",
                       description="Check each table row of FILE against its machine code. Several FILEs "
                                   "are checked over --jobs processes, one process a file, and printed in "
                                   "the order given, each under a 'File: FILE' heading (--json: "
                                   "{\"files\": [...]}); the exit status is the worst of theirs.")
    v.add_argument("file", metavar="FILE", nargs="+")
    v.add_argument("--function", metavar="NAME", help="only this function, row by row")
    v.add_argument("--address", type=parse_address, metavar="A", help="only the function holding A")
    v.add_argument("--json", action="store_true", help="print JSON instead of text")
    v.add_argument("--baseline", metavar="JSON", help="report only disagreements not in this earlier --json output")
    v.add_argument("--jobs", type=int, metavar="N",
                   help="check the functions (several FILEs: the files) over N processes "
                        "(default: one per CPU; 1 with --function/--address)")
    v.set_defaults(handler=cmd_validate)
    k = sub.add_parser("kallsyms", help="write a symbol file for GDB from a copy of /proc/kallsyms",
                       description="Write an ELF symbol file from a copy of the Linux kernel's /proc/kallsyms "
                                   "(read as root): give it to GDB with `symbol-file OUT` to debug the kernel "
                                   "under QEMU; the plugin finds the kernel's ORC tables from it.")
    k.add_argument("kallsyms", metavar="KALLSYMS")
    k.add_argument("out", metavar="OUT")
    k.set_defaults(handler=cmd_kallsyms)
    for name, rc in (("gdbinit", "~/.gdbinit"), ("lldbinit", "~/.lldbinit")):
        init = sub.add_parser(name, help="print the line that loads the plugin from %s" % rc,
                              description="Print the line to put in %s to load this installation's "
                                          "plugin; --append adds it there (once)." % rc)
        init.add_argument("--append", action="store_true", help="add the line to %s unless it is there" % rc)
        init.add_argument("--file", metavar="PATH", help="the init file to append to (default %s)" % rc)
    return parser


def parse_source_list(text):
    """--sources LIST, read as the debuggers' commands read it."""
    from plugin.engine import DEFAULT_SOURCES
    try:
        return convert(OPTIONS["sources"], text, DEFAULT_SOURCES)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_kallsyms(args):
    from plugin.modules import kallsyms
    try:
        count = kallsyms.write(args.kallsyms, args.out)
    except (OSError, ValueError) as exc:
        return _fail("%s: %s" % (args.kallsyms, getattr(exc, "strerror", None) or exc))
    print("%s: %d symbols; in GDB: symbol-file %s" % (args.out, count, args.out))
    return 0


def cmd_validate(args):
    # The whole process collects its youngest objects as seldom as a module's check does
    # (plugin.validate.offline.fewer_collections): restoring the default after the check would
    # make one collection walk everything still alive (python3.11: 0.14 s) just before the
    # process ends with os._exit (_end), which frees nothing one by one.
    from plugin.validate.offline import YOUNG_OBJECTS
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
    if len(args.file) > 1:
        from plugin.validate import many
        return many.run(args, validate_file)
    args.file = args.file[0]
    return validate_file(args)


def validate_file(args):
    """validate of one FILE (args.file a path): PE files by plugin.validate.pe, the others by command."""
    if _is_pe(args.file):
        from plugin.validate import pe as pe_validate
        return pe_validate.run(args)
    from plugin.validate import command
    return command.run(args)


def cmd_tables(args):
    """Each FILE's tables (under a "File:" heading when there are several);
    the exit status is the worst of the files'."""
    if len(args.file) == 1:
        return tables_of(args.file[0], args)
    if args.json:
        return _fail("--json takes one FILE (%d given)" % len(args.file))
    worst = 0
    for n, path in enumerate(args.file):
        sys.stdout.write("%sFile: %s\n" % ("\n" if n else "", path))
        sys.stdout.flush()
        worst = max(worst, tables_of(path, args))
    return worst


def tables_of(path, args):
    """Exit status 0: every entry decoded; 1: some entries (or the rows after
    a bad instruction) could not be, each listed as a problem; 2: the input
    cannot be used at all (one line on stderr)."""
    from plugin.render import tables
    from plugin.file_targets import load
    if _is_pe(path):
        if args.arch:           # as for ELF: there is no slice to choose
            return _fail("cannot open %s: --arch selects a slice of a universal Mach-O file; this is a PE file, "
                         "whose code is for one machine" % path)
        return _pe_tables(path, args.json, args.address, args.sources)
    try:
        target, modules = load(path, args.arch)
    except unusable_input() as exc:
        return _fail("cannot open %s: %s" % (path, getattr(exc, "strerror", None) or exc))
    write = tables.write_json if args.json else tables.write_text
    problems = write(target, modules, args.address, sys.stdout, args.sources)
    return 1 if len(problems) > problems.misses else 0


def _is_pe(path) -> bool:
    """Does a regular file start with "MZ"? (A fifo or a device is left to load()'s refusal: reading
    one could block or never end.)"""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"MZ"
    except OSError:
        return False


PE_SOURCE = "pdata"         # the only table source of a PE image (plugin/strategies/pdata.py)


def _no_pe_source(path, as_json: bool) -> int:
    """--sources without pdata on a PE file: no table, as for an ELF file without the sources named
    (the headers are still read: a damaged file is refused as without the option)."""
    from plugin.formats import pe
    with open(path, "rb") as f:
        pe.read_headers(pe.file_reader(f.read()))
    if as_json:
        sys.stdout.write('{"sources": [], "problems": []}\n')
    else:
        print("no unwind tables found (a PE file's only unwind tables are pdata's, not in --sources)")
    return 0


def _pe_tables(path, as_json=False, address=None, sources=None):
    """A PE file's .pdata entries, x64 or ARM64 (plugin.render.pe_tables), as text or JSON;
    address: only the entry covering it (an address at the ImageBase, as llvm-readobj prints);
    sources: --sources (nothing unless it names pdata)."""
    from plugin.render import pe_tables
    try:
        if sources is not None and PE_SOURCE not in sources:
            return _no_pe_source(path, as_json)
        return (pe_tables.write_json if as_json else pe_tables.write_text)(path, sys.stdout, address)
    except BrokenPipeError:
        raise                   # the reader went away (`| head`): main() ends quietly
    except unusable_input() as exc:
        return _fail("cannot open %s: %s" % (path, getattr(exc, "strerror", None) or exc))


def unusable_input() -> tuple:
    """What the file system, pyelftools and the decoders raise for input that cannot be used."""
    return bad_file_errors()


def _fail(message):
    sys.stderr.write("python -m plugin: error: %s\n" % message)
    return 2


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command is None:
        return _fail("no command given; try: tables FILE")
    if args.command in ("gdbinit", "lldbinit"):
        from plugin import install
        if not args.append:
            print(install.init_line(args.command))
            return 0
        try:
            print(install.append_line(args.command, args.file))
        except OSError as exc:
            return _fail("cannot append: %s" % exc)
        return 0
    try:
        return getattr(args, "handler", cmd_tables)(args)
    except ModuleNotFoundError as exc:      # the plugin's own needs, for an interpreter that lacks them
        name = (exc.name or "a module").split(".")[0]
        return _fail("%s is not installed for %s (Python %s): install the plugin with this interpreter's pip "
                     "(%s -m pip install CHECKOUT), or pip install %s"
                     % (name, sys.executable, sys.version.split()[0], sys.executable, _PACKAGES.get(name, name)))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return _fail("interrupted")


def _end(status) -> None:
    """Leave with `status`, the output flushed, without freeing the process's objects one by one (a
    large file's validate made millions: 0.4-0.5 s of python3.11's CPU went to that after the output
    was written). Nothing is left to do: a --jobs pool is closed by then."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe (`| head`): nothing more can be written
            pass
    os._exit(status if isinstance(status, int) else 0 if status is None else 1)


if __name__ == "__main__":
    _end(main())
