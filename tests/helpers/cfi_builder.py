"""A tiny assembler for hand-made CFI sections, shared by the test_cfi_* files.

Every byte of a test section is spelled out by the test that needs it;
this module only does the bookkeeping that is easy to get wrong by hand:
lengths, CIE pointers (relative in .eh_frame, absolute in .debug_frame),
pc-relative pointers, padding. Its own tests (tests/oracle/test_cfi_asm.py)
check it against llvm-dwarfdump, so the unit tests' expectations do not rest on this file
and plugin/formats/cfi.py agreeing with each other only.
"""

import struct

from plugin.memory import PE_OMIT, Region

X86_RSP, X86_RBP, X86_RBX, X86_RIP = 7, 6, 3, 16


from plugin.leb128 import encode_sleb as sleb, encode_uleb as uleb  # noqa: E402


_FORMATS = {0x02: ("H", 2), 0x03: ("I", 4), 0x04: ("Q", 8),
            0x0A: ("h", 2), 0x0B: ("i", 4), 0x0C: ("q", 8)}


def encode_pointer(encoding, value, field_address, address_size=8, bases=None,
                   order="<"):
    """Bytes of `value` in DW_EH_PE encoding `encoding` at `field_address`.

    For DW_EH_PE_indirect, `value` is the address of the slot (the caller
    puts the real pointer in memory behind `deref`).
    """
    bases = bases or {}
    app = encoding & 0x70
    pad = b""
    if app == 0x10:
        value -= field_address
    elif app == 0x20:
        value -= bases["text"]
    elif app == 0x30:
        value -= bases["data"]
    elif app == 0x40:
        value -= bases["func"]
    elif app == 0x50:
        pad = b"\0" * ((-field_address) % address_size)
    fmt = encoding & 0x0F
    if fmt == 0x00:
        code = {2: "H", 4: "I", 8: "Q"}[address_size]
        return pad + struct.pack(order + code, value & ((1 << 8 * address_size) - 1))
    if fmt == 0x01:
        return pad + uleb(value)
    if fmt == 0x09:
        return pad + sleb(value)
    code, size = _FORMATS[fmt]
    if code.isupper():
        value &= (1 << 8 * size) - 1
    return pad + struct.pack(order + code, value)


class Builder:
    """Appends CIEs and FDEs to one section; `region()` gives the result.

    kind "eh_frame" or "debug_frame"; `address` is where the section lives
    (pc-relative pointers are computed against it).
    """

    def __init__(self, kind="eh_frame", address=0x10000, address_size=8, order="<"):
        self.kind = kind
        self.address = address
        self.address_size = address_size
        self.order = order
        self.data = bytearray()
        self.cies = {}          # offset -> (fde_encoding, has_z, version, segment_size)

    @property
    def name(self):
        return "." + self.kind

    def _pack(self, code, value):
        return struct.pack(self.order + code, value)

    def _entry(self, make_body, is_64, pad):
        offset = len(self.data)
        header = 12 if is_64 else 4
        body = make_body(offset + header)
        if pad:
            # Entries are padded with DW_CFA_nop to a multiple of the address size.
            body += b"\0" * ((-(header + len(body))) % self.address_size)
        if is_64:
            self.data += self._pack("I", 0xFFFFFFFF) + self._pack("Q", len(body))
        else:
            self.data += self._pack("I", len(body))
        self.data += body
        return offset

    def _id(self, is_64, value):
        if self.kind == "debug_frame" and is_64:
            return self._pack("Q", value)
        return self._pack("I", value)

    def cie(self, instructions=b"", *, version=1, augmentation="zR", code_align=1,
            data_align=-8, ra=X86_RIP, fde_encoding=0x1B, aug_data=None,
            address_size=None, segment_size=0, is_64=False, pad=True, eh_ptr=b""):
        """Append a CIE. aug_data: the augmentation data (without its length
        for 'z' augmentations); by default the 'R' byte for "zR"."""
        if aug_data is None:
            aug_data = bytes([fde_encoding]) if augmentation == "zR" else b""
        chars = augmentation[2:] if augmentation.startswith("eh") else augmentation
        has_z = chars.startswith("z")

        def body(id_field):
            if self.kind == "eh_frame":
                out = self._id(False, 0)
            else:
                out = self._id(is_64, 0xFFFFFFFFFFFFFFFF if is_64 else 0xFFFFFFFF)
            out += bytes([version]) + augmentation.encode("latin-1") + b"\0" + eh_ptr
            if version >= 4:
                out += bytes([address_size or self.address_size, segment_size])
            out += uleb(code_align) + sleb(data_align)
            out += bytes([ra]) if version == 1 else uleb(ra)
            out += (uleb(len(aug_data)) + aug_data) if has_z else aug_data
            return out + instructions

        offset = self._entry(body, is_64, pad)
        encoding = fde_encoding if "R" in augmentation else 0x00
        self.cies[offset] = (encoding, has_z, version, segment_size)
        return offset

    def fde(self, cie, start, size, instructions=b"", *, aug_data=b"", is_64=False,
            pad=True, cie_pointer=None, bases=None, segment=b""):
        """Append an FDE for [start, start+size) under the CIE at offset `cie`."""
        # A CIE not built here (a test pointing anywhere): the usual layout
        # of the section kind, "zR" pcrel|sdata4 or "" absptr.
        default = (0x1B, True, 1, 0) if self.kind == "eh_frame" else (0x00, False, 1, 0)
        encoding, has_z, _, _ = self.cies.get(cie, default)
        if self.kind == "debug_frame":
            encoding = 0x00

        def body(id_field):
            if cie_pointer is not None:
                pointer = cie_pointer
            elif self.kind == "eh_frame":
                pointer = id_field - cie
            else:
                pointer = cie
            out = self._id(is_64, pointer) + segment
            field = self.address + id_field + len(out)
            out += encode_pointer(encoding, start, field, self.address_size, bases,
                                  self.order)
            out += encode_pointer(encoding & 0x0F, size, 0, self.address_size, None, self.order)
            if has_z:
                out += uleb(len(aug_data)) + aug_data
            return out + instructions

        return self._entry(body, is_64, pad)

    def terminator(self):
        self.data += b"\0\0\0\0"

    def raw(self, data):
        self.data += data

    def region(self, fetch_counter=None):
        if fetch_counter is None:
            return Region.from_bytes(self.name, self.address, bytes(self.data),
                                     "little" if self.order == "<" else "big")
        return counting_region(self.name, self.address, bytes(self.data), fetch_counter)


def counting_region(name, address, data, calls):
    """A Region that fetches through a function recording (address, size) in `calls`."""
    def fetch(at, size):
        calls.append((at, size))
        return data[at - address:at - address + size]
    return Region(name, address, len(data), fetch)


def hdr_bytes(entries, address, eh_frame_address, table_encoding=0x3B,
              address_size=8, eh_frame_ptr_enc=0x1B, fde_count_enc=0x03):
    """An .eh_frame_hdr at `address` with (initial location, FDE address) entries."""
    out = bytearray([1, eh_frame_ptr_enc, fde_count_enc, table_encoding])
    bases = {"data": address}
    out += encode_pointer(eh_frame_ptr_enc, eh_frame_address, address + len(out),
                          address_size, bases)
    if fde_count_enc != PE_OMIT:
        out += encode_pointer(fde_count_enc, len(entries), address + len(out), address_size, bases)
    for location, fde in entries:
        out += encode_pointer(table_encoding, location, address + len(out), address_size, bases)
        out += encode_pointer(table_encoding, fde, address + len(out), address_size, bases)
    return bytes(out)
