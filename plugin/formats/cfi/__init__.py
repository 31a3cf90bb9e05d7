"""DWARF call frame information: .eh_frame, .debug_frame and .eh_frame_hdr.

A CFI section is a sequence of entries: CIEs (what many functions share:
alignment factors, the return-address column, pointer encodings, the
initial rules) and FDEs (one address range each, pointing back at a CIE,
with a program of DW_CFA_* instructions). Running the CIE's initial
instructions and then the FDE's gives the rows of the unwind table: for
each address range, how to compute the CFA and how to recover each
register of the caller (plugin/model/rules.py).

One file per concern: entries.py (CIE and FDE records, 32/64-bit lengths,
augmentations), section.py (a whole section: the walk over its entries and
the sorted FDE index), header.py (.eh_frame_hdr and its search table),
instructions.py (the DW_CFA_* opcodes decoded), rows.py (the interpreter:
instructions to Rows) and listing.py (instructions as text).

References: DWARF 5 section 6.4 (call frame information), the LSB
"Exception Frames" chapter (.eh_frame, .eh_frame_hdr, augmentations,
DW_EH_PE_* pointer encodings), the AArch64 DWARF supplement
(DW_CFA_AARCH64_negate_ra_state, augmentations 'B' and 'G').

Choices where the sources differ or leave room (each also noted where it
is made):

- .eh_frame with a 64-bit length: the CIE id / CIE pointer stays 4 bytes,
  as the LSB specifies and LLVM reads it (GDB and readelf read 8 bytes).
  .debug_frame DWARF64 uses 8 bytes, as DWARF specifies.
- AArch64 augmentations: 'B' (return address signed with the B key) sets
  CIE.pauth_b_key; 'G' (MTE-tagged stack frames) sets CIE.mte_tagged.
- Personality and LSDA pointers with DW_EH_PE_indirect are followed through
  `deref` when it can read them; otherwise the value is None (and for the
  personality, CIE.personality_slot keeps the pointer's address). Unwinding
  does not need them, so they never make an entry undecodable.
- A zero length ends .eh_frame (the terminator); in .debug_frame it is
  4 bytes of padding and the walk goes on.
- Location advances and DW_CFA_set_loc in a CIE's initial instructions are
  errors: the initial instructions describe one state, not a table.
- DW_CFA_restore inside the CIE program itself removes the rule (there is
  no initial rule yet); in an FDE it restores the CIE's rule or removes it.
- DW_CFA_def_cfa_register with no CFA defined yet gives register+0 (both
  readelf and llvm-dwarfdump do this); with an expression CFA it gives
  register + the offset of the last register+offset rule (libgcc, GDB and
  readelf keep that offset; llvm-dwarfdump does not) and the row says so in
  Row.note. DW_CFA_def_cfa_offset(_sf) with an expression or no CFA is an
  error, as are DW_CFA_def_cfa_offset(_sf) with an expression or no CFA
  (DWARF: "valid only if the current CFA rule is defined to use a register
  and offset").
- DW_CFA_remember_state saves the CFA rule, the register rules and the
  aarch64 RA-signing state; the GNU_args_size value is not saved (as in
  libgcc, where it lives outside the remembered register set).
- Rows: a new row starts at each location advance that moves the location;
  an advance by 0 keeps the current row. Instructions after the location
  reaches the FDE's end cannot affect any address in the FDE and are not
  interpreted (they are still decoded, so bad bytes there are errors).
- Also decoded, beyond the usual set: DW_CFA_MIPS_advance_loc8 (0x1d), and on
  aarch64 DW_CFA_AARCH64_negate_ra_state_with_pc (0x2c), which toggles
  Row.ra_signed like 0x2d (the pc diversifier does not matter for stripping).
- Every row has a CFA rule: a row that would start before any
  DW_CFA_def_cfa* is a DecodeError (unwinding cannot use it, and Row users
  rely on `cfa` being a CfaRule).
"""

from plugin.formats.cfi.entries import CIE, FDE
from plugin.formats.cfi.header import EhFrameHdr
from plugin.formats.cfi.listing import describe
from plugin.formats.cfi.rows import execute, execute_contained, row_at, uses_set_loc
from plugin.formats.cfi.section import CfiSection

__all__ = ["CIE", "FDE", "CfiSection", "EhFrameHdr", "describe", "execute", "execute_contained", "row_at",
           "uses_set_loc"]
