"""Adding a record to a :class:`~marlaas.core.records.RecordLog`'s field lists, compiled with
the hot path (the scheduler writes a record for nearly every piece of work that ends)."""

from __future__ import annotations


def append_row(fields: list[list[object]], row: tuple[object, ...]) -> None:
    """Append each value of ``row`` to the list of its field (``fields``: one list per field,
    in the row's order)."""
    for i in range(len(row)):
        fields[i].append(row[i])
