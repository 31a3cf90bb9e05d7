"""The linear sweeps of a module's functions as capstone gave them once, kept to be given again.

The control-flow pass (CallFacts.decide_noreturn) sweeps every function's
code with capstone; each function's analysis sweeps it again
(CodeAnalysis.decode_range), a `.cold` part's in every round that analyses
it. The first sweep of each function is kept as its instructions' sizes
(a byte each) and texts (one string, NUL between them), and a sweep of the
same range again is read from those (python3.11: 12 MB kept, 0.38 s of
capstone against 0.12 s), dropped once a function's analysis is final.
At most MAX_KEPT bytes are kept: a much larger module's other functions are
swept by capstone again.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Dict, Iterator, List, Optional, Tuple

Found = Tuple[int, int, str, str]       # capstone's disasm_lite: (address, size, mnemonic, op_str)
MAX_KEPT = 64 << 20                     # bytes of sizes and texts kept at most (python3.11: 12 MB)


class Sweeps:
    def __init__(self):
        self._kept: Dict[int, Tuple[int, bytes, str]] = {}    # start -> (end, sizes, "mnemonic\0operands\0...")
        self._size = 0                                          # bytes kept so far

    def keep(self, start: int, end: int, sizes: bytearray, texts: List[str]) -> None:
        """The sweep of [start, end): each instruction's size, and its mnemonic and operands in turn."""
        if self._size < MAX_KEPT:
            text = "\0".join(texts)
            self._size += len(sizes) + len(text)
            self._kept[start] = (end, bytes(sizes), text)

    def again(self, start: int, end: int, last: bool) -> Optional[Iterator[Found]]:
        """The sweep of [start, end) kept before, as capstone gave it; None when none was. last: it is
        not asked for again (dropped: memory)."""
        kept = self._kept.pop(start, None) if last else self._kept.get(start)
        if kept is None or kept[0] != end:
            return None
        return _replay(start, kept[1], kept[2])


def _replay(address: int, sizes: bytes, texts: str) -> Iterator[Found]:
    words = iter(texts.split("\0"))        # mnemonic, operands, mnemonic, ...
    return zip(accumulate(sizes, initial=address), sizes, words, words)
