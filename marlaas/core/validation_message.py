"""A pydantic validation error as one line that names each bad field by its path."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

MAX_PROBLEMS_SHOWN = 5
"""Problems named in one error line; the rest are counted."""


def format_validation_error(
    err: ValidationError, source: str, schema: type[BaseModel] | None = None
) -> str:
    """One line naming each problem (the first few): ``source: jobs[2].rl.steps: Input should
    be greater than 0 (got -3); ...``. With the ``schema`` validated against, an unknown field
    names the field it is closest to (``did you mean 'steps'?``), else the fields allowed
    there."""
    problems: dict[tuple[str, str], list[str]] = {}
    for problem in err.errors():
        loc, key = _key_of(problem)
        path = shape = ""  # shape: the path with every list index as [*]
        for part in loc:
            if isinstance(part, int):
                path, shape = path + f"[{part}]", shape + "[*]"
            elif not str(part).startswith(("function-", "tagged-union")):
                path += f".{part}" if path else str(part)
                shape += f".{part}" if shape else str(part)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "invalid_key":
            message = "keys must be field names (text)"
        if problem["type"] == "extra_forbidden":
            message = "unknown field" + _known_fields_hint(schema, problem["loc"])
        if problem["type"] == "union_tag_invalid":  # pydantic's message holds the whole tag
            ctx = problem.get("ctx", {})
            message = (f"{ctx.get('discriminator')}: unknown kind {short_repr(ctx.get('tag'))}; "
                       f"expected one of {ctx.get('expected_tags')}")  # fmt: skip
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {short_repr(got)})"
        if key is not None:  # the key is what was got
            message, shown = f"key {short_repr(key)}: {message}", ""
        problems.setdefault((shape, message + shown), []).append(path)
    lines = []
    for (_, message), paths in problems.items():
        alike = f" (and {len(paths) - 1} more like it)" if len(paths) > 1 else ""
        lines.append(f"{paths[0]}: {message}{alike}" if paths[0] else message + alike)
    more = len(lines) - MAX_PROBLEMS_SHOWN
    text = "; ".join(lines[:MAX_PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return f"{source}: {text}"


def _key_of(problem: dict) -> tuple[tuple, Any]:
    """A problem's location less the mapping key it is about, and that key (None when it is
    about a value): pydantic puts a key where a list index goes (``(1,)`` for a model given
    the key 1, ``('args', 1, '[key]')`` for a mapping's), which would read as ``[1]``."""
    loc = tuple(problem["loc"])
    if problem["type"] == "invalid_key" and loc:
        return loc[:-1], problem.get("input", loc[-1])
    if len(loc) >= 2 and loc[-1] == "[key]":
        return loc[:-2], problem.get("input", loc[-2])
    return loc, None


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters with the length said when longer."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


MAX_FIELDS_LISTED = 12
"""Fields an unknown field's message lists when none is close to it (the rest counted)."""


def _known_fields_hint(schema: type[BaseModel] | None, loc: tuple) -> str:
    """`` (did you mean 'x'?)`` for the unknown field at ``loc``, or `` (known fields: ...)``;
    empty when the fields there are not known."""
    known = sorted(_fields_at(schema, loc[:-1])) if schema is not None else []
    if not known:
        return ""
    close = closest(str(loc[-1]), known)
    if close is not None:
        return f" (did you mean {close!r}?)"
    more = len(known) - MAX_FIELDS_LISTED
    listed = ", ".join(known[:MAX_FIELDS_LISTED]) + (f", and {more} more" if more > 0 else "")
    return f" (known fields: {listed})"


def _fields_at(schema: type[BaseModel], loc: tuple) -> set[str]:
    """Names of the fields of the model(s) that ``loc`` (a pydantic error location, less
    its last part) leads to in ``schema``; empty when it leads to none."""
    at: list[Any] = [schema]
    for part in loc:
        if isinstance(part, str) and part.startswith(("function-", "tagged-union")):
            continue
        at = [inner for kind in at for inner in _step(kind, part)]
    return {name for kind in at for leaf in type_leaves(kind) if _is_model(leaf)
            for name in leaf.model_fields}  # fmt: skip


def _step(kind: Any, part: str | int) -> list[Any]:
    """The types one location part leads to from ``kind``: a model's field, a list's item, a
    mapping's value, or a union's member picked by its tag (``lognormal``) or its name."""
    found = []
    for leaf in type_leaves(kind):
        origin, args = get_origin(leaf), get_args(leaf)
        if _is_model(leaf) and isinstance(part, str):
            if part in leaf.model_fields:
                found.append(leaf.model_fields[part].annotation)
            elif part == leaf.__name__ or any(_is_tag(f.annotation, part)
                                              for f in leaf.model_fields.values()):  # fmt: skip
                found.append(leaf)
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
            found.append(args[0])
        elif origin is dict and len(args) == 2:
            found.append(args[1])
    return found


def type_leaves(kind: Any) -> list[Any]:
    """``kind`` without its Annotated metadata, a union as its members (recursively)."""
    origin = get_origin(kind)
    if origin is Annotated:
        return type_leaves(get_args(kind)[0])
    if origin is Union or origin is _UNION_TYPE:
        return [leaf for member in get_args(kind) for leaf in type_leaves(member)]
    return [kind]


_UNION_TYPE = type(int | str)
"""``X | Y``'s type (types.UnionType, named without importing types)."""


def closest(name: str, known: list[str]) -> str | None:
    """The one of ``known`` that ``name`` is a likely misspelling of: within an edit distance
    of a third of its length (at least 1), the nearest (the first of equals); None if none."""
    best, best_distance = None, max(1, len(name) // 3) + 1
    for candidate in known:
        distance = _edit_distance(name.lower(), candidate.lower())
        if distance < best_distance:
            best, best_distance = candidate, distance
    return best


def _edit_distance(a: str, b: str) -> int:
    """Edits turning ``a`` into ``b``: insertions, deletions, substitutions and swaps of two
    neighbours (the optimal-string-alignment distance)."""
    if len(a) > 256 or len(b) > 256:
        return max(len(a), len(b))  # a misspelt field is short: no quadratic work on a long one
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _is_tag(annotation: Any, part: str) -> bool:
    """Whether ``annotation`` is a Literal holding ``part`` (a tagged union's tag)."""
    return any(get_origin(leaf) is Literal and part in get_args(leaf)
               for leaf in type_leaves(annotation))  # fmt: skip
