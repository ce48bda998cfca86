"""Policies of one's own by import path: used like a name everywhere, checked on load."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from marlaas.cli import main
from marlaas.core.policies import base, get_policy
from marlaas.policy_path import PolicyLoadError, load_policy

MODULE = '''
from marlaas.core.policies import Policy


class LongestFirst(Policy):
    """Most remaining tokens first."""

    idea = "most remaining tokens first"
    source = "a test"

    def key(self, job):
        return (-job.remaining_tokens, job.index)


class NoTuple(Policy):
    def key(self, job):
        return job.index


class Needy(Policy):
    def __init__(self, speed):
        self.speed = speed

    def key(self, job):
        return (job.index,)


class NoKey(Policy):
    pass


class BadEngines(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return engine.index


class BadShare(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return (engine.index,)

    def open_share(self, job, homes):
        return 1.5


class StaleBacklog(Policy):
    def key(self, job):
        return (job.remaining_tokens / max(job.backlog_s, 1.0), job.index)


class Backlog(StaleBacklog):
    reads_backlog = True


class StaleHolders(Policy):
    def key(self, job):
        return (job.longest_alone_jobs, job.index)


class StaleEnd(Policy):
    def key(self, job):
        return (job.backlog_end_s - job.arrival_s, job.index)


class PlacesByBacklog(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return (job.backlog_s, engine.index)  # read at each placement: never stale


NOT_A_CLASS = 3
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``userpol`` with the policies above, importable for this test (and
    registered for it only: later tests see the bundled policies alone)."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    root = tmp_path / "pkgs"
    (root / "userpol").mkdir(parents=True)
    (root / "userpol" / "__init__.py").write_text("")
    (root / "userpol" / "policies.py").write_text(textwrap.dedent(MODULE))
    (root / "userpol" / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    (root / "userpol" / "script.py").write_text("import sys\n\nsys.exit('usage: script.py')\n")
    monkeypatch.syspath_prepend(str(root))
    yield "userpol"
    for name in [m for m in sys.modules if m.startswith("userpol")]:
        del sys.modules[name]


def test_a_policy_by_import_path_runs_like_a_name(package, tmp_path, capsys):
    path = f"{package}.policies:LongestFirst"
    assert load_policy(path) == path and load_policy(path) == path  # once, then known
    assert type(get_policy(path)).__name__ == "LongestFirst"
    out = tmp_path / "run"
    code = main(["simulate", "traces/small.yaml", "--policy", path, "--out", str(out), "--quiet",
                 "--set", "jobs.*.rl.steps=2"])  # fmt: skip
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["policy"] == path


def test_a_policy_that_says_it_reads_the_backlog_loads(package, capsys):
    path = f"{package}.policies:Backlog"
    assert load_policy(path) == path and get_policy(path).reads_backlog
    placing = f"{package}.policies:PlacesByBacklog"
    assert load_policy(placing) == placing and not get_policy(placing).reads_backlog
    assert main(["policies"]) == 0  # listed, though it has neither idea nor docstring
    assert f"{path} (no idea or docstring given)" in " ".join(capsys.readouterr().out.split())


def test_a_workload_file_may_name_a_policy_by_import_path(package, tmp_path):
    workload = tmp_path / "w.yaml"
    text = Path("traces/small.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("policy:")]
    workload.write_text("\n".join([f"policy: {package}.policies:LongestFirst", *lines]))
    out = tmp_path / "run"
    assert main(["simulate", str(workload), "--out", str(out), "--quiet",
                 "--set", "jobs.*.rl.steps=2"]) == 0  # fmt: skip


def test_set_may_name_a_policy_by_import_path(package, tmp_path, capsys):
    path = f"{package}.policies:LongestFirst"
    out = tmp_path / "run"
    assert main(["simulate", "traces/small.yaml", "--set", f"policy={path}", "--out", str(out),
                 "--quiet", "--set", "jobs.*.rl.steps=2"]) == 0  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["policy"] == path
    bad = f"{package}.broken:X"
    assert main(["simulate", "traces/small.yaml", "--set", f"policy={bad}", "--out",
                 str(tmp_path / "o"), "--quiet"]) == 2  # fmt: skip
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "importing module 'userpol.broken' failed" in err_lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("attr", "says"),
    [
        ("nomodule.x:Y", "cannot import module 'nomodule.x'"),
        ("{pkg}.broken:X", "importing module 'userpol.broken' failed (RuntimeError: no GPU"),
        ("{pkg}.script:X", "importing module 'userpol.script' failed (SystemExit: usage"),
        ("{pkg}.policies:Missing", "has no 'Missing'"),
        ("{pkg}.policies:NOT_A_CLASS", "is not a subclass of marlaas.core.policies.Policy"),
        ("{pkg}.policies:NoKey", "NoKey does not define key(self, job)"),
        ("{pkg}.policies:NoTuple", "key(job 'probe') returned int 0, not a tuple of numbers"),
        ("{pkg}.policies:Needy", "making it failed (TypeError"),
        (
            "{pkg}.policies:BadEngines",
            "engine_key(job 'probe', engine 0) returned int 0, not a tuple of numbers or None",
        ),
        (
            "{pkg}.policies:BadShare",
            "open_share(job 'probe') returned 1.5, not a share from 0 to 1",
        ),
        (
            "{pkg}.policies:StaleBacklog",
            "key reads backlog_s but StaleBacklog does not set reads_backlog = True",
        ),
        (
            "{pkg}.policies:StaleHolders",
            "key reads longest_alone_jobs but StaleHolders does not set reads_backlog = True",
        ),
        (
            "{pkg}.policies:StaleEnd",
            "key reads backlog_end_s but StaleEnd does not set reads_backlog = True",
        ),
    ],
)
def test_a_bad_policy_path_is_one_clear_error(package, attr, says, tmp_path, capsys):
    path = attr.format(pkg=package)
    with pytest.raises(PolicyLoadError, match=None) as err:
        load_policy(path)
    assert says in str(err.value) and path in str(err.value)
    code = main(["simulate", "traces/small.yaml", "--policy", path, "--out",
                 str(tmp_path / "o"), "--quiet"])  # fmt: skip
    assert code == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and says in err_lines[0]


def test_an_unknown_name_still_lists_the_policies():
    with pytest.raises(KeyError, match="choose one of: affinity, bottleneck, cp-srpt, fair, fifo"):
        get_policy("fastest")


def test_policies_prints_each_idea_and_source(capsys):
    assert main(["policies"]) == 0
    listed = capsys.readouterr().out
    for name in ("themis", "affinity", "las-srpt", "cp-srpt"):
        assert name in listed
    assert "source: Themis (Mahajan et al., NSDI 2020)" in listed
