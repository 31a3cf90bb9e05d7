"""Jump tables for plugin.analysis.flow: the targets a table the code indexes holds.

A table is read as far as the compare of its index bounds it (plugin.analysis.bounds), or, with no
bound, while its entries are instructions of the function; entries in a part of the function placed
elsewhere (a .cold part) are exits. TableReading is a part of flow.Analyser, which follows the targets
(those of a table read without a bound last, plugin.analysis.flow.Analyser._follow_unbounded).
"""
from __future__ import annotations

from plugin.analysis.bounds import BOUND, MAX_TABLE_ENTRIES, bounded_entries
from plugin.analysis.state import Kind, addr
from plugin.analysis.transfer import evaluate


_INSTRUCTION, _PART = "instruction", "part"      # what a table entry's target was found to be


class TableReading:
    """Reads jump tables for flow.Analyser (its facts, read, decode_at, is_boundary and in_part, and
    table_entries: (table, entry size, base, function start, end) -> {index: (target, what it is)}: a
    table is read again on every path that reaches its jump with a new state, and what an entry was
    found to be stays so: an instruction of the function, or an instruction of a part outside it
    (decoded instructions stay decoded); _INSTRUCTION, _PART, or None: to be looked at again)."""

    def _pc_table_targets(self, result, expr, state):
        """("pc_table", table, entry size, unit, base, falls through): target i = base + unit * entry i
        (entry size 0: no table, target i = base + unit * i), for i up to the last compared immediate."""
        _, table, size, unit, base, _ = expr
        bound = state.regs.get(BOUND)
        if bound is None or bound[0] != Kind.ADDR or not 0 <= bound[1] < MAX_TABLE_ENTRIES:
            return []
        targets = []
        for index in range(bound[1] + 1):
            entry = index
            if size:
                try:
                    entry = int.from_bytes(self.read(table + index * size, size), "little")
                except Exception:       # the table runs out of readable memory
                    return []
            target = base + unit * entry
            if not result.start <= target < result.end:
                return []
            targets.append(target)
        return sorted(set(targets))

    def _table_targets(self, result, insn, state):
        """(targets, bounded): a jump table's the code indexes, read while they stay inside the function;
        bounded: by a compare of the index."""
        expr = insn.indirect
        if expr is None:
            return [], False
        if expr[0] == "mem" and expr[1][0] == "indexed":
            base = addr(0) if expr[1][1] is None else state.reg(expr[1][1])    # None: an absolute table
            if base[0] != Kind.ADDR:
                return [], False
            table, size, relative = base[1] + expr[1][4], self.facts.POINTER_SIZE, None
            index = getattr(self.facts, "REGISTERS", {}).get(expr[1][2])
            entries = bounded_entries(state, index[0] if index else None)
            bounded = entries is not None
            count = entries if bounded else MAX_TABLE_ENTRIES
        else:
            if expr[0] == "mem":
                return [], False
            value = evaluate(expr, state)
            if value[0] != Kind.TARGET:
                return [], False
            table, size, relative = value[1], value[2], value[4]
            bounded = bool(value[3])
            count = value[3] or MAX_TABLE_ENTRIES
        return self._read_table(result, insn, table, size, relative, count, bounded), bounded

    def _read_table(self, result, insn, table, size, relative, count, bounded):
        """The targets of count entries at table (relative to `relative`, or absolute), while they are
        instructions of the function; with a count bounded by the index's compare, entries in a part
        of the function placed elsewhere (a .cold part) too: the jump leaves with its frame (an exit)."""
        targets, parts = [], []
        known = self.table_entries.setdefault((table, size, relative, result.start, result.end), {})
        for index in range(count):
            target, kind = known.get(index, (None, None))
            if kind is _INSTRUCTION:
                targets.append(target)
                continue
            if kind is _PART:
                if not bounded:
                    break
                parts.append(target)
                continue
            if target is None:
                try:
                    raw = self.read(table + index * size, size)
                except Exception:       # the table runs out of readable memory: it ended
                    break
                entry = int.from_bytes(raw, "little", signed=relative is not None)
                target = relative + entry if relative is not None else entry
                if self.facts.INTERWORKING:
                    target &= ~1                # bit 0 of an Arm table entry: the target is Thumb code
                known[index] = (target, None)
            if not result.start <= target < result.end or not self.is_boundary(target):
                if bounded and self.in_part(target):
                    if not result.start <= target < result.end:
                        known[index] = (target, _PART)
                    parts.append(target)
                    continue
                break               # past the table: data, or an entry of another table
            found = self.decode_at(target)
            if found is None or self.facts.is_padding(found.text):
                break
            known[index] = (target, _INSTRUCTION)
            targets.append(target)
        found = sorted(set(targets)) + sorted(set(parts))
        known = result.tables.get(insn.address)
        if found and (known is None or set(found) - set(known[3])):
            merged = tuple(sorted(set(found) | set(known[3] if known else ())))
            result.tables[insn.address] = (table, len(targets) + len(parts), bounded, merged)
        return found
