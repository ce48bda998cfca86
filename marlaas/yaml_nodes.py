"""A YAML document's nodes checked before they are built into data: a file marlaas reads
(a workload, a cost profile, a cluster file, a job spec, a ``--set`` value) holds text,
numbers, lists and mappings, never bytes (``!!binary``). A problem is one line naming the
field where it is, its line and its column."""

from __future__ import annotations

import yaml

BINARY_TAG = "tag:yaml.org,2002:binary"
MERGE_TAG = "tag:yaml.org,2002:merge"


def check_nodes(root: yaml.Node, source: str, error: type) -> None:
    """Raise ``error`` naming the first value (in the document's order) that is bytes: its
    field path (``jobs[0].name``), line and column. Each node is visited once, however
    often YAML aliases repeat it."""
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
            stack.extend((value, _field(path, key)) for key, value in reversed(node.value))
        elif node.tag == BINARY_TAG:
            where = f"{path}: " if path else ""
            raise error(f"{source}: {where}a !!binary value (bytes) at {_at(node)}; this file "
                        "holds text, not bytes: write the text itself, not its base64")  # fmt: skip


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
