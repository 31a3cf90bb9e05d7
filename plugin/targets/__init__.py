"""Targets backed by files rather than a live process: an ELF or Mach-O file
laid out as the loader would, for the offline command and the unit tests."""


def open_file(path, arch=None):
    """FileTarget for an ELF file, MachOFileTarget for a Mach-O (thin or universal) one.

    arch picks a slice of a universal Mach-O file; ValueError for any other file.
    """
    from plugin.formats.macho import FAT_MAGIC, FAT_MAGIC_64
    from plugin.modules.macho import is_macho_magic
    from plugin.targets.elf import FileTarget, map_regular_file
    from plugin.targets.macho import MachOFileTarget
    head = map_regular_file(path)[:4]       # ValueError for a FIFO, a device, an empty file
    if is_macho_magic(head) or int.from_bytes(head, "big") in (FAT_MAGIC, FAT_MAGIC_64):
        return MachOFileTarget(path, arch=arch)
    if arch is not None:
        raise ValueError("--arch selects a slice of a universal Mach-O file; this is not a Mach-O file")
    return FileTarget(path)
