"""The system programs some tests need, and what a test does where one is missing.

Two are not Python packages: bubblewrap (``bwrap``, the sandbox of the ``python_exec``
environment, docs/sandbox.md) and Chromium (renders report.html and the service's dashboard
headless). A test that needs one is marked ``@needs_bwrap`` or ``@needs_chromium``; where the
program is missing (or, for bubblewrap, cannot build a sandbox here) the test is skipped, the
reason naming the install line. With ``MARLAAS_REQUIRE_SYSTEM_TOOLS=1`` (CI, which installs
both: .ci/run) it fails instead, so that a CI run cannot pass without them. tests/conftest.py
applies the marks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest

REQUIRE_ENV = "MARLAAS_REQUIRE_SYSTEM_TOOLS"
"""Set to 1 to fail, not skip, a test whose system program is missing."""
MARKER = "needs_tool"


def bwrap_unusable() -> str | None:
    """Why the code sandbox cannot run here (bubblewrap missing, no user namespaces), or
    None when it can."""
    from marlaas.envs.sandbox_runtime import unavailable

    return unavailable()


CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium() -> str | None:
    """The path of the Chromium binary on PATH, or None."""
    return next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)


def chromium_unusable() -> str | None:
    """Why Chromium cannot run the browser tests here, or None when it can."""
    return None if chromium() else f"`{CHROMIUM_NAMES[0]}` not found on PATH"


@dataclass(frozen=True)
class SystemTool:
    """A system program tests need: how to install it, and how to tell it is missing."""

    package: str
    """The Debian/Ubuntu package that installs it."""
    purpose: str
    """What the tests use it for, in a few words."""
    unusable: Callable[[], str | None]
    """Why it cannot be used here, or None when it can."""

    @property
    def install(self) -> str:
        """The command that installs it."""
        return f"apt-get install -y {self.package}"


TOOLS = {
    "bwrap": SystemTool("bubblewrap", "the python_exec code sandbox", bwrap_unusable),
    "chromium": SystemTool("chromium", "renders report.html, the dashboard", chromium_unusable),
}

needs_bwrap = pytest.mark.needs_tool("bwrap")
needs_chromium = pytest.mark.needs_tool("chromium")


def required() -> bool:
    """Whether a missing system program fails its tests (``MARLAAS_REQUIRE_SYSTEM_TOOLS=1``)."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def missing_message(name: str) -> str | None:
    """One line saying that the program ``name`` (a key of :data:`TOOLS`) is missing, why,
    and how to install it; None when it is usable."""
    tool = TOOLS[name]
    why = tool.unusable()
    if why is None:
        return None
    return f"needs {tool.package} ({tool.purpose}): {why}; install it: {tool.install}"


def require(name: str) -> None:
    """Skip the running test when the program ``name`` is missing; fail it instead under
    ``MARLAAS_REQUIRE_SYSTEM_TOOLS=1``."""
    message = missing_message(name)
    if message is None:
        return
    if required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1: it must be installed)", pytrace=False)
    pytest.skip(message)
