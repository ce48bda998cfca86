"""A user's class by import path, "pkg.module:Class": environments and policies load theirs
through :func:`import_subclass`, so both refuse a bad path with the same one-line errors."""

from __future__ import annotations

import importlib


def import_subclass(
    path: str, base: type, base_name: str, what: str, error: type[Exception]
) -> type:
    """The class ``path`` names, which must subclass ``base`` (``base_name``: where users
    import it from); else ``error``, one line that starts with ``what`` (e.g. "policy
    'pkg.mod:Cls'") and says what is wrong: the module does not import (or fails as it
    imports, a script's ``sys.exit`` included), has no such attribute, or it is not such a
    class."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    except (Exception, SystemExit) as exc:  # a user's module that fails (or exits) on import
        raise error(f"{what}: importing module {module_name!r} failed ({one_line(exc)})") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise error(f"{what}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise error(f"{what}: {attr!r} is not a subclass of {base_name}")
    return cls


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line (300 characters at most)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def shown(value: object, limit: int = 120) -> str:
    """``repr(value)`` of what a user's class returned, on one line, cut to ``limit``
    characters (a repr that fails: the value's type), for the errors that name it."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
