"""Each source's strategy, bound once (the binding part of a source's declaration).

The data part (name, kind, description, "found by" words, planned, the
sections GDB reads itself) is plugin.settings.SOURCES, below this layer,
where settings, option parsing and the claim policy read it. The engine, the
validators and the offline `tables` read this table. A source's dump of its
entries is bound in plugin/render/tables.py (DUMPS), the layer its printers
live in. See docs/design.md, "How to add a source".
"""
from __future__ import annotations

from typing import Callable, Dict

from plugin.settings import Trust
from plugin.strategies import analysis, cfi, compact, exidx, frame_pointer, pdata, scan, sframe

# source name -> its step(frame, ctx) -> Outcome. Keys are settings.Trust values; tests
# check that every declared source has one and no other name does.
STRATEGIES: Dict[str, Callable] = {
    Trust.CFI.value: cfi.step,
    Trust.SFRAME.value: sframe.step,
    Trust.COMPACT.value: compact.step,
    Trust.EXIDX.value: exidx.step,
    Trust.PDATA.value: pdata.step,
    Trust.ANALYSIS.value: analysis.step,
    Trust.FRAME_POINTER.value: frame_pointer.step,
    Trust.SCAN.value: scan.step,
}
