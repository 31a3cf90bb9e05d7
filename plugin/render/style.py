"""What a piece of text is, so a debugger can colour it with its own styles.

Renderers call `style(Styled.FUNCTION, "main")`; the default leaves text
plain, GDB's commands pass one that uses GDB's `style function`, `style
address` and `style filename` settings (and nothing when `set style enabled off`).
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Callable


class Styled(str, Enum):
    FUNCTION = "function"
    ADDRESS = "address"
    FILE = "filename"


Styler = Callable[[Styled, str], str]


def plain(kind: Styled, text: str) -> str:
    return text


_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def visible_length(text: str) -> int:
    """How many columns `text` takes on a terminal: colour escapes take none."""
    return len(_ESCAPE.sub("", text))
