"""Per-architecture facts, looked up by name.

An Arch says how wide a pointer is, which DWARF register numbers are the
stack pointer, frame pointer and return-address column, what each number is
called, and which registers a callee must preserve. Everything else in the
core takes these facts from here instead of assuming x86_64.
"""

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class Arch:
    name: str
    address_size: int
    byteorder: str
    registers: dict            # DWARF number -> name
    sp: int
    fp: int
    ra: int                    # the return-address column of the CFI
    pc: int                    # the register the caller's pc is delivered in
    callee_saved: tuple
    elf_machine: int
    aliases: dict = field(default_factory=dict)   # extra names -> DWARF number

    def name_of(self, number):
        return self.registers.get(number, "r%d" % number)

    def number_of(self, name):
        name = name.lower().lstrip("$%")
        for number, known in self.registers.items():
            if known == name:
                return number
        if name in self.aliases:
            return self.aliases[name]
        raise KeyError(name)

    @cached_property
    def mask(self):
        return (1 << (8 * self.address_size)) - 1

    def strip_pointer_auth(self, value):
        """Drop pointer-authentication bits from a code address (aarch64)."""
        return value


from plugin.arch import x86_64, aarch64, i386, s390x  # noqa: E402  (modules need Arch)

BY_NAME = {a.name: a for a in (x86_64.ARCH, aarch64.ARCH, i386.ARCH, s390x.ARCH)}
BY_ELF_MACHINE = {a.elf_machine: a for a in BY_NAME.values()}


def by_name(name):
    """Arch for a debugger's or ELF's architecture name ('i386:x86-64', 'aarch64'...)."""
    key = name.lower()
    for alias, arch in (("x86-64", "x86_64"), ("x86_64", "x86_64"), ("amd64", "x86_64"),
                        ("aarch64", "aarch64"), ("arm64", "aarch64"),
                        ("s390", "s390x"), ("i386", "i386"), ("i686", "i386"), ("x86", "i386"), ("arm", "arm")):
        if alias in key:
            return BY_NAME[arch]
    raise KeyError("unsupported architecture %r" % name)

from plugin.arch import arm  # noqa: E402,F401  (32-bit Arm; registers itself in BY_NAME and BY_ELF_MACHINE)
