"""Text from a tree, made safe where it is shown: on the instructor's terminal and in a spreadsheet.

A tree chooses its folder's name and the messages its code raises. On a terminal, escape codes
in them would act (clear the screen, rewrite lines, set the window title) and bidirectional
controls would reorder what is read; in a spreadsheet, a cell that starts with `=`, `+`, `-` or
`@` is a formula. `for_terminal` writes every control and format character as a visible escape
(`\\x1b`, `\\u202e`); `for_csv` does that and starts a would-be formula with `'`, as OWASP
advises. The JSON gradebook keeps the text as it was: JSON escapes it on its own.
"""

from __future__ import annotations

import unicodedata

FORMULA_STARTS = ("=", "+", "-", "@")


def for_terminal(text: str) -> str:
    """`text` with every character a terminal would act on written as a visible escape."""
    return "".join(_visible(c) for c in str(text))


def for_csv(text: str) -> str:
    """`text` for a spreadsheet cell: escapes as for_terminal, and never a formula."""
    shown = for_terminal(text)
    return f"'{shown}" if shown.startswith(FORMULA_STARTS) else shown


def tree_name(name: str) -> str:
    """A tree's name for the terminal: for_terminal, and where it holds any character beyond ASCII
    (or a `\\` that could imitate that form), then its code points in brackets, so that
    names that print alike (`alice` and `аlice`, a Cyrillic а) are told apart: `аlice [\\u0430lice]`."""
    name = str(name)
    shown = for_terminal(name)
    if name.isascii() and "\\" not in name:
        return shown
    return f"{shown} [{''.join(map(_plain_ascii, name))}]"


def _plain_ascii(character: str) -> str:
    return character if " " <= character <= "~" and character != "\\" else _escaped(character)


def tree_name_for_csv(name: str) -> str:
    """A tree's name for a spreadsheet cell: tree_name, and never a formula."""
    shown = tree_name(name)
    return f"'{shown}" if shown.startswith(FORMULA_STARTS) else shown


def _visible(character: str) -> str:
    if character.isprintable() and unicodedata.category(character) not in ("Cf", "Zl", "Zp"):
        return character
    return _escaped(character)


def _escaped(character: str) -> str:
    point = ord(character)
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"
