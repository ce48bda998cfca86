"""Headless Chromium for the dashboard's tests: the page's DOM after its scripts ran, a
screenshot, and a small tree of the dumped DOM to query (stdlib html.parser).

A test that runs Chromium is marked ``@needs_chromium`` (tests/system_tools.py: skipped
without Debian's ``chromium``, with the install line; failed instead in CI).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from tests.system_tools import chromium

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--enable-logging=stderr", "--v=0")  # fmt: skip
VIRTUAL_TIME_MS = 5000
"""How long the page runs (virtual time: its timers and fetches, not the wall clock)."""
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip
"""Elements without an end tag."""


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [*FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={VIRTUAL_TIME_MS}"]
    return subprocess.run([chromium(), *flags, *args], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip


def dump_dom(url: str, profile: Path) -> tuple[str, list[str]]:
    """The DOM of ``url`` after its scripts ran, and the page's uncaught errors."""
    done = _chromium(profile, "--dump-dom", url)
    errors = [line for line in done.stderr.splitlines() if "Uncaught" in line]
    return done.stdout, errors


def screenshot(url: str, out: Path, profile: Path, size: str = "1200,520") -> Path:
    """A PNG of ``url`` as rendered in a ``size`` (width,height) window."""
    _chromium(profile, f"--window-size={size}", f"--screenshot={out}", url)
    return out


@dataclass
class Element:
    """An element of a parsed page: its tag, attributes and children (text as str)."""

    tag: str
    attrs: dict[str, str]
    children: list = field(default_factory=list)

    @property
    def text(self) -> str:
        """Its text, its descendants' included."""
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self):
        """This element and every element under it, in document order."""
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str, **attrs: str | bool) -> list[Element]:
        """The elements under this one named ``tag`` with ``attrs`` (True: present at all;
        ``data_job`` for ``data-job``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [el for el in self.iter() if el.tag == tag and all(
            (name in el.attrs) if value is True else el.attrs.get(name) == value
            for name, value in wanted.items())]  # fmt: skip

    def by_id(self, id_: str) -> Element:
        """The element whose id is ``id_`` (AssertionError when none)."""
        found = [el for el in self.iter() if el.attrs.get("id") == id_]
        assert found, f"no element with id {id_!r}"
        return found[0]


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.open[-1].children.append(Element(tag, {n: v or "" for n, v in attrs}))

    def handle_endtag(self, tag):
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data):
        self.open[-1].children.append(data)


def parse(html: str) -> Element:
    """The tree of a page (Chromium's serialized DOM: every element closed)."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root
