"""Decoders of the unwind table formats (bytes in, records out, bounded).

dwarf_expr is imported here so that a rule's DWARF expression is shown
disassembled wherever a decoder has made one (plugin.model.rules).
"""
from plugin.formats import dwarf_expr  # noqa: F401
