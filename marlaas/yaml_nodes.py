"""A YAML document's nodes checked before they are built into data: a file marlaas reads
(a workload, a cost profile, a cluster file, a job spec, a ``--set`` value) holds what JSON
holds (text, numbers, booleans, null, lists and mappings), never a value of another YAML tag
(``!!binary`` bytes, a ``!!set``, an ``!!omap`` or ``!!pairs``, a ``!!timestamp``, a
``!!python/...`` or a tag of its own), and every key of its mappings is a field name (text).
A problem is one line naming the field where it is, the key or value as written, its line
and its column."""

from __future__ import annotations

import yaml

YAML_TAG = "tag:yaml.org,2002:"
"""The prefix of YAML's own tags, written ``!!`` (``!!str``)."""
STR_TAG = YAML_TAG + "str"
BINARY_TAG = YAML_TAG + "binary"
MERGE_TAG = YAML_TAG + "merge"
SEQ_TAG, MAP_TAG = YAML_TAG + "seq", YAML_TAG + "map"
JSON_TAGS = {
    yaml.ScalarNode: {STR_TAG, *(YAML_TAG + kind for kind in ("int", "float", "bool", "null"))},
    yaml.SequenceNode: {SEQ_TAG},
    yaml.MappingNode: {MAP_TAG},
}
"""The tags of the values JSON holds, by the kind of node that holds them."""
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
    """Raise ``error`` naming the first key that is not text or value that JSON cannot hold
    (in the document's order): its field path (``jobs[0].name``), what it is, its line and
    column. Each node is visited once, however often YAML aliases repeat it."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        problem = _not_json(node)
        if problem:
            raise error(f"{source}: {path + ': ' if path else ''}{problem}")
        if isinstance(node, yaml.SequenceNode):
            stack.extend(
                (item, f"{path}[{i}]") for i, item in reversed(list(enumerate(node.value)))
            )
        elif isinstance(node, yaml.MappingNode):
            for key, _ in node.value:
                _check_key(key, path, source, error)
            stack.extend((value, _field(path, key)) for key, value in reversed(node.value))


def _not_json(node: yaml.Node) -> str | None:
    """What is wrong with ``node`` when its tag is not of a value JSON holds (bytes, a set,
    an ordered mapping, pairs, a date, a tag of YAML's Python extensions or of the file's
    own), with what to write instead; None when it is one (a << that is no key is text)."""
    tag = node.tag
    if tag in JSON_TAGS[type(node)] or (tag == MERGE_TAG and node.value == "<<"):
        return None
    at = _at(node)
    items = node.value[: SHOWN_CHARS + 1] if not isinstance(node, yaml.ScalarNode) else []
    if tag == BINARY_TAG:
        return (f"a !!binary value (bytes) at {at}; this file holds text, not bytes: write "
                "the text itself, not its base64")  # fmt: skip
    if tag == YAML_TAG + "set" and isinstance(node, yaml.MappingNode):
        listed = written(yaml.SequenceNode(SEQ_TAG, [key for key, _ in items]))
        return f"a !!set value at {at}; this file holds lists, not sets: write the list {listed}"
    if tag == YAML_TAG + "omap" and isinstance(node, yaml.SequenceNode):
        maps = [
            item.value[: SHOWN_CHARS + 1] for item in items if isinstance(item, yaml.MappingNode)
        ]
        mapping = written(yaml.MappingNode(MAP_TAG, [pair for m in maps for pair in m]))
        return (f"a !!omap value (an ordered mapping) at {at}; this file's mappings keep "
                f"their keys' order: write the mapping {mapping}")  # fmt: skip
    if tag == YAML_TAG + "pairs" and isinstance(node, yaml.SequenceNode):
        return (f"a !!pairs value at {at}; write a list of mappings without the tag: "
                f"{written(yaml.SequenceNode(SEQ_TAG, items))}")  # fmt: skip
    if tag == YAML_TAG + "timestamp" and isinstance(node, yaml.ScalarNode):
        return (f"a !!timestamp value (a date) at {at}; this file holds no dates: write the "
                f"date as text, without the tag ({written(node)})")  # fmt: skip
    return (f"a value tagged {_tag(tag)} at {at}; this file holds text, numbers, true and "
            "false, null, lists and mappings, and no other YAML tags")  # fmt: skip


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


def _tag(tag: str) -> str:
    """``tag`` as written: ``!!set`` for YAML's own, at most SHOWN_CHARS characters."""
    text = "!!" + tag[len(YAML_TAG) :] if tag.startswith(YAML_TAG) else tag
    text = text if text.isprintable() else repr(text)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _at(node: yaml.Node) -> str:
    """``line L, column C`` where ``node`` starts."""
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"
