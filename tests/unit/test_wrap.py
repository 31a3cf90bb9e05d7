"""Explain's line wrapping: textwrap's answer for plain text, and the same breaks when colour escapes are added."""

import re
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from plugin.render.explain import wrap

WORDS = st.sampled_from(["a", "bb", "rsp+16", "[CFA-8]", "0x7fffffffe000", "x-y", "--",
                         "a_word_longer_than_any_width_used_here_at_all"])
ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@st.composite
def lines(draw):
    lead = " " * draw(st.sampled_from([0, 2, 4]))
    words = draw(st.lists(WORDS, min_size=1, max_size=14))
    gaps = [" " * draw(st.integers(1, 3)) for _ in words[1:]]
    return lead + words[0] + "".join(g + w for g, w in zip(gaps, words[1:]))


@settings(max_examples=500)
@given(lines(), st.integers(5, 70))
def test_plain_text_wraps_as_textwrap(line, width):
    lead = len(line) - len(line.lstrip())
    first = line.split()[0]
    if lead + len(first) > width:
        return      # textwrap then drops the line's own indentation; wrap keeps it
    expected = line if len(line) <= width else textwrap.fill(
        line, width=width, subsequent_indent=" " * (lead + 4), break_long_words=False, break_on_hyphens=False)
    assert wrap(line, width) == expected


@settings(max_examples=500)
@given(lines(), st.integers(5, 70))
def test_colour_escapes_take_no_columns(line, width):
    styled = line.replace("rsp+16", "\x1b[34mrsp+16\x1b[m").replace("bb", "\x1b[1;33mbb\x1b[m")
    assert ESCAPE.sub("", wrap(styled, width)) == wrap(line, width)


def test_no_width_leaves_the_line_alone():
    line = "x " * 200
    assert wrap(line, None) == line and wrap(line, 0) == line
