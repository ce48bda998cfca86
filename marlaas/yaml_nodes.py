"""A YAML document's nodes checked before they are built into data: a file marlaas reads
(a workload, a cost profile, a cluster file, a job spec, a ``--set`` value) holds text,
numbers, lists and mappings, never bytes (``!!binary``), and every key of its mappings is a
field name (text). A problem is one line naming the field where it is, the key or value as
written, its line and its column."""

from __future__ import annotations

import yaml

STR_TAG = "tag:yaml.org,2002:str"
BINARY_TAG = "tag:yaml.org,2002:binary"
MERGE_TAG = "tag:yaml.org,2002:merge"
KINDS = {
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean (YAML 1.1 reads on, off, yes and no as booleans)",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
    BINARY_TAG: "bytes (!!binary)",
}
"""What a key of each non-text tag is, in words."""
SHOWN_CHARS = 40
"""Characters of a key shown in an error (the rest cut)."""


def check_nodes(root: yaml.Node, source: str, error: type) -> None:
    """Raise ``error`` naming the first key that is not text or value that is bytes (in the
    document's order): its field path (``jobs[0].name``), what it is, its line and column.
    Each node is visited once, however often YAML aliases repeat it."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(
                (item, f"{path}[{i}]") for i, item in reversed(list(enumerate(node.value)))
            )
        elif isinstance(node, yaml.MappingNode):
            for key, _ in node.value:
                _check_key(key, path, source, error)
            stack.extend((value, _field(path, key)) for key, value in reversed(node.value))
        elif node.tag == BINARY_TAG:
            where = f"{path}: " if path else ""
            raise error(f"{source}: {where}a !!binary value (bytes) at {_at(node)}; this file "
                        "holds text, not bytes: write the text itself, not its base64")  # fmt: skip


def _check_key(key: yaml.Node, path: str, source: str, error: type) -> None:
    """Raise ``error`` unless ``key`` (of the mapping at ``path``) is text or a merge key
    (``<<``), naming it as written: ``key 1``, ``key [a, b]``."""
    if key.tag == MERGE_TAG or (isinstance(key, yaml.ScalarNode) and key.tag == STR_TAG):
        return
    if isinstance(key, yaml.ScalarNode):
        kind = KINDS.get(key.tag, f"not text ({key.tag})")
        quotable = key.value and key.tag != BINARY_TAG
        hint = f"; quote it ('{written(key)}') if that is the name you mean" if quotable else ""
    else:
        kind = "a list" if isinstance(key, yaml.SequenceNode) else "a mapping"
        hint = ""
    where = f"{path}: " if path else ""
    raise error(f"{source}: {where}key {written(key)} at {_at(key)} is {kind}; keys must be "
                f"field names (text){hint}")  # fmt: skip


def written(node: yaml.Node) -> str:
    """``node`` as it reads in YAML's flow style (``1``, ``[a, b]``, ``{a: 1}``), at most
    SHOWN_CHARS characters (then ``...``); never more work than that, whatever the node's
    size or its aliases."""
    parts: list[str] = []
    size = 0
    stack: list[yaml.Node | str] = [node]
    while stack and size <= SHOWN_CHARS:
        item = stack.pop()
        if isinstance(item, str):
            text = item
        elif isinstance(item, yaml.ScalarNode):
            text = item.value if item.value.isprintable() else repr(item.value)
            text = text or "(empty)"
        elif isinstance(item, yaml.SequenceNode):
            text, inner = "[", [[child] for child in item.value[: SHOWN_CHARS + 1]]
            stack.extend(reversed([*_joined(inner), "]"]))
        else:
            text, inner = "{", [[k, ": ", v] for k, v in item.value[: SHOWN_CHARS + 1]]
            stack.extend(reversed([*_joined(inner), "}"]))
        parts.append(text)
        size += len(text)
    text = "".join(parts)
    return text if not stack and size <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _joined(items: list[list]) -> list:
    """``items`` flattened with ``", "`` between them."""
    return [part for i, item in enumerate(items) for part in ([", "] if i else []) + item]


def _field(path: str, key: yaml.Node) -> str:
    """The path of the value under ``key`` in the mapping at ``path`` (a merge key ``<<``
    adds its mappings' fields to the mapping it is in)."""
    if key.tag == MERGE_TAG:
        return path
    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
    name = name if len(name) <= 40 and name.isprintable() else repr(name[:40])
    return f"{path}.{name}" if path else name


def _at(node: yaml.Node) -> str:
    """``line L, column C`` where ``node`` starts."""
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"
