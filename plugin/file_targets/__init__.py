"""Targets backed by files rather than a live process: an ELF or Mach-O file
laid out as the loader would, for the offline command and the unit tests."""
from __future__ import annotations


def open_file(path, arch=None):
    """FileTarget for an ELF file, MachOFileTarget for a Mach-O (thin or universal) one.

    arch picks a slice of a universal Mach-O file; ValueError for any other file.
    """
    from plugin.formats.macho import FAT_MAGIC, FAT_MAGIC_64
    from plugin.modules.macho import is_macho_magic
    from plugin.file_targets.elf import FileTarget, map_regular_file
    from plugin.file_targets.macho import MachOFileTarget
    head = map_regular_file(path)[:4]       # ValueError for a FIFO, a device, an empty file
    if is_macho_magic(head) or int.from_bytes(head, "big") in (FAT_MAGIC, FAT_MAGIC_64):
        return MachOFileTarget(path, arch=arch)
    if arch is not None:
        raise ValueError("--arch selects a slice of a universal Mach-O file; this is not a Mach-O file")
    if head != ELF_MAGIC:
        raise ValueError("neither an ELF, Mach-O nor PE file: it starts with %s (%s)"
                         % (" ".join("%02x" % b for b in head), _known_format(head)))
    return FileTarget(path)


ELF_MAGIC = b"\x7fELF"
_OTHER_FORMATS = ((b"MZ", "a PE/COFF file (Windows): `tables FILE` and `validate FILE` read its unwind data"),
                  (b"#!", "a script"), (b"!<ar", "an ar archive: extract its members"))


def _known_format(head: bytes) -> str:
    """A word on what a file that is neither ELF nor Mach-O looks like."""
    for magic, what in _OTHER_FORMATS:
        if head.startswith(magic):
            return what
    return "an unknown format"


def load(path, arch=None):
    """(target, modules) of a file as the offline commands read it: laid out by open_file,
    its modules found in that memory (an executable's or library's built from its sections
    when it has no loaded header; an object file's are the caller's to choose). Raises one of
    plugin.errors.bad_file_errors() for a file that cannot be used at all."""
    from plugin.modules import ModuleMap
    target = open_file(path, arch)
    modules = ModuleMap(target)
    if target.header_address is None and not getattr(target, "relocatable", False):
        modules.add(target.section_module())
    _forget_tables_not_in_file(target, modules)
    return target, modules


def _forget_tables_not_in_file(target, modules) -> None:
    """A separate debug-info file keeps the section headers of .eh_frame_hdr
    and .eh_frame but not their bytes (SHT_NOBITS): those tables are in the
    program it was split from, so they are not looked for here (rather than
    each reported as unreadable); nor is a PT_GNU_EH_FRAME of size 0, which
    such files, and files whose tables objcopy removed, keep with no section behind it."""
    from plugin.errors import bad_file_errors
    elf = getattr(target, "elf", None)
    for name in (".eh_frame_hdr", ".eh_frame") if elf is not None else ():
        try:
            section = elf.get_section_by_name(name)
        except bad_file_errors():        # unreadable section headers: the program headers decide
            section = None
        for module in modules.all():
            location = module.tables.get(name)
            if location is not None and (location.size == 0 or section is not None
                                         and section["sh_type"] == "SHT_NOBITS"):
                del module.tables[name]
