"""Whether a text is a whole number written in ASCII digits."""

from __future__ import annotations


def ascii_digits(text: str) -> bool:
    """True when ``text`` is one or more ASCII digits (``0``-``9``), a number ``int`` reads:
    ``str.isdigit`` alone holds for ``'²'`` and other digits that ``int`` refuses too."""
    return text.isascii() and text.isdigit()
