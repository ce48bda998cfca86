"""A policy loaded by import path is checked while it runs, not only on load: what its
methods raise (SystemExit too) or return amiss is one error line naming the path, the method
and the job; it is named by its path; an empty or malformed path is refused plainly."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest

from marlaas.cli import main
from marlaas.core.policies import Policy, base, get_policy
from marlaas.core.policies.fair import Fair
from marlaas.policy_path import PolicyError, PolicyLoadError, load_policy

MODULE = '''
import copy
import math

from marlaas.core.policies import Policy
from marlaas.core.policies.fair import Fair


class RaiseLater(Policy):
    def key(self, job):
        if job.name != "probe":
            raise RuntimeError("boom in key")
        return (job.index,)


class ListKey(Policy):
    def key(self, job):
        return [job.index] if job.name != "probe" else (job.index,)


class MixedKey(Policy):
    def key(self, job):
        return ("x",) if job.name == "a" else (1,)


class NoneKey(Policy):
    def key(self, job):
        return (None,) if job.name != "probe" else (job.index,)


class NaNKey(Policy):
    def key(self, job):
        return (math.nan, job.index) if job.name != "probe" else (0.0, job.index)


class RecursionKey(Policy):
    def key(self, job):
        return self.key(job) if job.name != "probe" else (job.index,)


class ExitKey(Policy):
    def key(self, job):
        if job.name != "probe":
            raise SystemExit(0)
        return (job.index,)


class EngRaise(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        if job.name != "probe":
            raise RuntimeError("engine boom")
        return (0,)


class EngBad(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return "str" if job.name != "probe" else (0,)


class EngNaN(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return (math.nan,)


class SetsName(Policy):
    def key(self, job):
        if job.name != "probe":
            job.name = "zzz"  # the scheduler's own JobState: its job table lost the job
        return (job.index,)


class ClearsGroups(Policy):
    def key(self, job):
        if job.name != "probe":
            job.groups.clear()  # what a field holds: the scheduler's own dict
        return (job.index,)


class AppendsReady(Policy):
    def key(self, job):
        if job.name != "probe":
            job.ready_gen.append(0)
        return (job.index,)


class SetsGroupTurn(Policy):
    def key(self, job):
        for group in job.groups.values():
            group.turn = 9
        return (job.index,)


class CallsTook(Policy):
    def key(self, job):
        if job.name != "probe":
            job.took_new_group()  # a method that changes the job
        return (job.index,)


class ReadsDeep(Policy):
    """Reads fields no protocol names, as a policy may."""

    def key(self, job):
        turns = sorted(group.turn for group in job.groups.values())
        return (job.spec.rl.group_size, len(job.ready_gen), len(turns), job.spec.rl.steps,
                job.index)  # fmt: skip


class DeletesDone(Policy):
    def key(self, job):
        if job.name != "probe":
            del job.done
        return (job.index,)


class SetsEngine(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        if job.name != "probe":
            engine.seqs = 0
        return (engine.index,)


class Looks(Policy):
    """Reads its job and engine as it would the scheduler's own objects."""

    def key(self, job):
        from marlaas.core.jobs import JobState

        twin = copy.copy(job)  # its own copy, which it may change
        twin.last_served = 7
        return (isinstance(job, JobState), job == job, twin.last_served, job.last_served,
                job.index)  # fmt: skip

    def engine_key(self, job, engine, homes):
        from marlaas.core.cluster import Engine

        return (isinstance(engine, Engine), engine == engine, engine.holds(job.name),
                engine.free_seqs, engine.index)  # fmt: skip


class ShareLater(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return (engine.index,)

    def open_share(self, job, homes):
        return 0.0 if job.name == "probe" else math.nan


class InfFirst(Policy):
    """Job b first, at minus infinity (as split-progress keys its holder)."""

    idea = "b first"
    source = "a test"

    def key(self, job):
        return (-math.inf if job.name == "b" else 0.0, True, job.index)

    def engine_key(self, job, engine, homes):
        return None if engine.index == 1 else (engine.index,)


class ReverseFair(Fair):
    """Fair, but the later job first."""

    def key(self, job):
        return (-job.index,)


class Named(Fair):
    name = "my-named"

    def key(self, job):
        return (-job.index,)


class ShadowFair(Fair):
    name = "fair"  # the bundled policy's name

    def key(self, job):
        return (-job.index,)


class NamedAgain(Policy):
    name = "my-named"  # Named's

    def key(self, job):
        return (job.index,)


class NamedAsPath(Policy):
    name = "checkpol.p:Plain"  # another class's import path: replay would run that one

    def key(self, job):
        return (-job.index,)


class RefusesEvery(Policy):
    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return None


class NumpyKeys(Policy):
    """Keys and engine keys of numpy scalars, as a key computed with numpy comes."""

    def key(self, job):
        import numpy as np

        return (np.float64(job.remaining_tokens), np.bool_(job.index > 0), np.int64(job.index))

    def engine_key(self, job, engine, homes):
        import numpy as np

        return (np.int64(engine.seqs), np.float32(engine.index))


class StartRaises(Policy):
    def start_run(self):
        raise RuntimeError("start boom")

    def key(self, job):
        return (job.index,)


class NamedFive(Policy):
    name = 5

    def key(self, job):
        return (job.index,)


class Plain(Policy):
    reads_backlog = True

    def key(self, job):
        return (job.index,)
'''

WORKLOAD = """\
name: tiny
seed: 0
policy: fair
cluster:
  pools:
    - {name: rollout, role: inference, devices: 2}
    - {name: train, role: training, devices: 1}
jobs:
  - name: a
    tenant: alice
    rl: {steps: 2, prompts_per_step: 2, group_size: 4, max_new_tokens: 256}
    response_tokens: {dist: lognormal, median: 100, sigma: 0.5}
  - name: b
    tenant: bob
    rl: {steps: 2, prompts_per_step: 2, group_size: 4, max_new_tokens: 256}
    response_tokens: {dist: lognormal, median: 100, sigma: 0.5}
"""


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``checkpol`` with the policies above, importable and registered for this
    test only."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    root = tmp_path / "pkgs"
    (root / "checkpol").mkdir(parents=True)
    (root / "checkpol" / "__init__.py").write_text("")
    (root / "checkpol" / "p.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(root))
    yield "checkpol.p"
    for name in [m for m in sys.modules if m.startswith("checkpol")]:
        del sys.modules[name]


@pytest.fixture
def workload(tmp_path):
    """A two-job workload that simulates in a fraction of a second."""
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    return str(path)


def simulate(workload: str, policy: str, out) -> int:
    return main(["simulate", workload, "--policy", policy, "--out", str(out), "--quiet"])


@pytest.mark.parametrize(
    ("cls", "says"),
    [
        ("RaiseLater", "key(job 'a') raised RuntimeError: boom in key"),
        ("ListKey", "key(job 'a') returned list [0], not a tuple of numbers"),
        ("MixedKey", "key(job 'b') returned (1,): a string where earlier keys had a number"),
        ("NoneKey", "key(job 'a') returned (None,): None is not a number or a string"),
        ("NaNKey", "key(job 'a') returned (nan, 0): NaN orders with nothing"),
        ("RecursionKey", "key(job 'a') raised RecursionError"),
        ("ExitKey", "key(job 'a') raised SystemExit: 0"),
        ("EngRaise", "engine_key(job 'a', engine 0) raised RuntimeError: engine boom"),
        ("EngBad", "engine_key(job 'a', engine 0) returned str 'str', not a tuple of numbers or "
                   "None"),
        ("EngNaN", "engine_key(job 'probe', engine 0) returned (nan,): NaN orders with nothing"),
        ("StartRaises", "start_run() raised RuntimeError: start boom"),
        ("ShareLater", "open_share(job 'a') returned nan, not a share from 0 to 1"),
        ("SetsName", "key(job 'a') raised AttributeError: the job is read-only to a policy: it "
                     "may not set 'name'"),
        ("DeletesDone", "key(job 'a') raised AttributeError: the job is read-only to a policy: "
                        "it may not delete 'done'"),
        ("ClearsGroups", "key(job 'a') raised AttributeError: a mapping is read-only to a "
                         "policy: it may not call 'clear'"),
        ("AppendsReady", "key(job 'a') raised AttributeError: a sequence is read-only to a "
                         "policy: it may not call 'append'"),
        ("SetsGroupTurn", "key(job 'a') raised AttributeError: the Group is read-only to a "
                          "policy: it may not set 'turn'"),
        ("CallsTook", "key(job 'a') raised AttributeError: the job is read-only to a policy: "
                      "it may not call 'took_new_group'"),
        ("SetsEngine", "engine_key(job 'a', engine 0) raised AttributeError: the engine is "
                       "read-only to a policy: it may not set 'seqs'"),
    ],
)  # fmt: skip
def test_a_policy_that_fails_as_it_runs_is_one_error_line(
    package, workload, tmp_path, capsys, cls, says
):
    path = f"{package}:{cls}"
    out = tmp_path / "o"
    assert simulate(workload, path, out) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1, err_lines
    assert f"policy '{path}': {says}" in err_lines[0]
    assert not out.exists()


def test_a_policy_reads_the_job_and_the_engine_as_they_are(package):
    """Read-only, but otherwise the scheduler's own objects to the policy: isinstance, ==,
    copy (a copy of its own) and the protocols' fields and methods read as on the objects."""
    from marlaas.core.cluster import Cluster
    from marlaas.core.cluster_spec import ClusterSpec
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.jobs import JobState
    from marlaas.core.policies import EngineView, JobView
    from marlaas.core.scheduling import SchedulingSpec
    from marlaas.policy_views import ReadOnlyEngine, ReadOnlyJob
    from marlaas.policy_views import view as _view

    policy = get_policy(load_policy(f"{package}:Looks"))
    job = JobState(JobSpec(name="a", tenant="t"), 3, 1)
    engine = Cluster.build(ClusterSpec(), SchedulingSpec().resolve()).engines[0]
    assert policy.key(job) == (True, True, 7, 0, 3) and job.last_served == 0
    assert policy.engine_key(job, engine, 0) == (True, True, False, engine.free_seqs, 0)
    seen, shown_engine = _view(ReadOnlyJob, job), _view(ReadOnlyEngine, engine)
    assert seen == job and job == seen and seen == _view(ReadOnlyJob, job)
    for name in [n for n in vars(JobView) if not n.startswith("_")]:
        assert getattr(seen, name) == getattr(job, name), name
    for name in [n for n in vars(EngineView) if not n.startswith("_") and n != "holds"]:
        assert getattr(shown_engine, name) == getattr(engine, name), name
    assert seen.spec == job.spec and seen.spec.rl.steps == job.spec.rl.steps  # read through
    with pytest.raises(AttributeError, match="the JobSpec is read-only"):
        seen.spec.name = "b"  # another object the job holds: read-only too
    with pytest.raises(AttributeError, match="the engine is read-only to a policy: it may "
                       "not delete 'seqs'"):  # fmt: skip
        del shown_engine.seqs


def test_the_error_is_a_policy_load_error_kind(package):
    path = f"{package}:RaiseLater"
    policy = get_policy(load_policy(path))
    job = type("Job", (), {"name": "x", "index": 0})()
    with pytest.raises(PolicyError, match=r"key\(job 'x'\) raised RuntimeError") as err:
        policy.key(job)
    assert isinstance(err.value, PolicyLoadError) and isinstance(err.value, ValueError)


def test_a_sweep_worker_reports_a_failing_policy_as_one_line(package, workload, tmp_path, capsys):
    path = f"{package}:RaiseLater"
    out = tmp_path / "sw"
    code = main(["sweep", workload, "--policies", f"fifo,{path}", "--workers", "2",
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "key(job 'a') raised RuntimeError: boom in key" in err_lines[0]
    assert not out.exists()


def test_infinite_keys_bools_and_none_engine_keys_run(package, workload, tmp_path):
    path = f"{package}:InfFirst"
    assert simulate(workload, path, tmp_path / "o") == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["policy"] == path


def test_the_wrapped_class_is_what_the_core_expects(package):
    path = f"{package}:InfFirst"
    cls = type(get_policy(load_policy(path)))
    assert issubclass(cls, Policy) and cls.__name__ == "InfFirst"
    assert cls.__doc__.startswith("Job b first") and (cls.idea, cls.source) == ("b first", "a test")
    assert cls.name == path and cls.ranks_engines and not cls.reads_backlog
    plain = type(get_policy(load_policy(f"{package}:Plain")))
    assert not plain.ranks_engines and plain.reads_backlog  # engine_key is not wrapped in
    assert plain.engine_key is Policy.engine_key and plain.open_share is Policy.open_share
    assert get_policy(path).key(type("J", (), {"name": "b", "index": 1})()) == (-math.inf, True, 1)


def test_built_in_policies_are_not_wrapped():
    assert type(get_policy("fair")) is Fair


def test_a_subclass_of_a_built_in_is_named_by_its_path(package, workload, tmp_path):
    path = f"{package}:ReverseFair"
    assert get_policy(load_policy(path)).name == path
    assert Fair.name == "fair"  # the built-in is left alone
    assert simulate(workload, path, tmp_path / "o") == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["policy"] == path
    named = f"{package}:Named"
    assert get_policy(load_policy(named)).name == "my-named"  # its own body names it


def test_a_name_of_another_policy_is_refused(package, workload, tmp_path, capsys):
    path = f"{package}:ShadowFair"
    with pytest.raises(PolicyLoadError, match=r"ShadowFair sets name = 'fair', the name of "
                       r"policy fair; runs of the two could not be told apart"):  # fmt: skip
        load_policy(path)
    assert simulate(workload, path, tmp_path / "o") == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and f"policy '{path}': ShadowFair sets name" in err_lines[0]
    assert not (tmp_path / "o").exists()
    load_policy(f"{package}:Named")
    with pytest.raises(PolicyLoadError, match=rf"the name of policy {package}:Named \(named "):
        load_policy(f"{package}:NamedAgain")
    assert get_policy(load_policy("marlaas.core.policies.fair:Fair")).name == "fair"  # itself


def test_keys_of_numpy_scalars_run_as_plain_numbers(package, workload, tmp_path):
    """A key of numpy scalars orders as the numbers it holds: the scheduler gets plain ints
    and floats (compared, numpy scalars give a numpy bool, which the compiled scheduler
    refused with a traceback: 'TypeError: bool object expected; got numpy.bool')."""
    from marlaas.core.cluster import Cluster
    from marlaas.core.cluster_spec import ClusterSpec
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.jobs import JobState
    from marlaas.core.scheduling import SchedulingSpec

    path = f"{package}:NumpyKeys"
    policy = get_policy(load_policy(path))
    job = JobState(JobSpec(name="a", tenant="t"), 3, 1)
    engine = Cluster.build(ClusterSpec(), SchedulingSpec().resolve()).engines[1]
    key, engine_key = policy.key(job), policy.engine_key(job, engine, 0)
    assert key == (job.remaining_tokens, True, 3) and engine_key == (0, 1.0)
    assert [type(item) for item in key + engine_key] == [float, bool, int, int, float]
    assert simulate(workload, path, tmp_path / "o") == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["policy"] == path


def test_a_run_a_policy_stalls_by_refusing_every_engine_names_it(
    package, workload, tmp_path, capsys
):
    """It said 'the run stalled at t=0.0 s; unfinished: ['a', 'b']', naming no policy."""
    path = f"{package}:RefusesEvery"
    assert simulate(workload, path, tmp_path / "o") == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0] == (
        f"marlaas: error: the run stalled at t=0.0 s; unfinished: ['a', 'b'] (policy {path!r} "
        "ranks engines: an engine_key of None for every engine a group fits leaves it unplaced)"
    )
    assert not (tmp_path / "o").exists()


def test_a_name_that_is_no_string_is_refused(package, workload, tmp_path, capsys):
    path = f"{package}:NamedFive"
    with pytest.raises(PolicyLoadError, match=r"NamedFive sets name = 5, not a string"):
        load_policy(path)
    assert simulate(workload, path, tmp_path / "o") == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "NamedFive sets name = 5, not a string" in err_lines[0]
    assert not (tmp_path / "o").exists()


def test_a_name_that_is_another_import_path_is_refused(package):
    """Whichever loads first: the class that takes the path as its name is refused, and the
    class at that path loads, named by it."""
    with pytest.raises(PolicyLoadError, match=r"NamedAsPath sets name = 'checkpol.p:Plain', "
                       r"an import path"):  # fmt: skip
        load_policy(f"{package}:NamedAsPath")
    assert get_policy(load_policy(f"{package}:Plain")).name == f"{package}:Plain"
    with pytest.raises(PolicyLoadError, match=r"NamedAsPath sets name = 'checkpol.p:Plain'"):
        load_policy(f"{package}:NamedAsPath")


def test_an_empty_policy_is_refused(package, workload, tmp_path, capsys):
    with pytest.raises(PolicyLoadError, match="an empty name"):
        load_policy("")
    assert simulate(workload, "", tmp_path / "o") == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "policy '': an empty name" in err_lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("path", ["checkpol.p:", "checkpol/p:ReverseFair", ":X", "fair:"])
def test_a_malformed_import_path_says_what_the_form_is(package, workload, tmp_path, capsys, path):
    form = r"unknown policy .*an import path written pkg\.module:Class"
    with pytest.raises(PolicyLoadError, match=form):
        load_policy(path)
    assert simulate(workload, path, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pkg.module:Class" in err
    assert "load_policy" not in err


def test_a_policy_may_read_what_no_protocol_names(package, workload, tmp_path):
    """Fields no protocol names read through, read-only, and the run goes on as before."""
    assert simulate(workload, f"{package}:ReadsDeep", tmp_path / "o") == 0


def test_what_a_job_holds_reads_read_only_and_equal(package):
    """A job's containers, the objects in them and its arrays read as they are, equal to the
    scheduler's own, and none can be changed through them; a frozen spec's methods run."""
    import numpy as np

    from marlaas.core.job_spec import JobSpec
    from marlaas.core.jobs import JobState
    from marlaas.policy_views import ReadOnlyJob, read_only, view

    job = JobState(JobSpec(name="a", tenant="t"), 3, 1)
    group = job.groups[0] = job.new_group(0)
    job.ready_gen.extend([0, 0])
    seen = view(ReadOnlyJob, job)
    assert seen.ready_gen == job.ready_gen and list(seen.ready_gen) == [0, 0]
    assert seen.ready_gen[:1] == [0] and len(seen.groups) == 1
    assert seen.groups[0] == group and seen.groups[0].turn == group.turn
    assert seen.spec.response_tokens.mean() == job.spec.response_tokens.mean()
    with pytest.raises(TypeError, match="read-only to a policy"):
        seen.ready_gen[0] = 1
    with pytest.raises(TypeError, match="read-only to a policy"):
        del seen.groups[0]
    with pytest.raises(AttributeError, match="it may not call 'new_group'"):
        seen.new_group(1)
    with pytest.raises(AttributeError, match="it may not call 'popitem'"):
        seen.groups.popitem()
    array = np.arange(3.0)
    shown = read_only(array)
    assert (shown == array).all() and not shown.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        shown[0] = 9.0
    assert read_only({1, 2}) == frozenset({1, 2})
    assert job.ready_gen == type(job.ready_gen)([0, 0]) and list(job.groups) == [0]  # untouched


def test_what_a_job_holds_reads_as_before_and_cannot_be_changed_through_a_copy():
    """A view is true or false as what it shows; a slice of a list is a list; copies and
    pickles of what a job holds work, the policy's own all the way down; an array cannot be
    made writeable again."""
    import copy
    import pickle

    import numpy as np

    from marlaas.core.job_spec import JobSpec
    from marlaas.core.jobs import JobState
    from marlaas.policy_views import ReadOnlyJob, read_only, view

    job = JobState(JobSpec(name="a", tenant="t"), 3, 1)
    job.groups[0] = job.new_group(0)
    job.finished[0] = [job.new_group(1)]
    seen = view(ReadOnlyJob, job)
    assert seen and seen.groups[0] and seen.spec  # no len() asked of a job or a group
    assert seen.finished[0][:1] == [job.finished[0][0]]  # as a list's slice: a list
    for copied in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        groups = copied(seen.groups)
        assert groups == job.groups and type(groups) is dict
        groups[0].turn = 7
        assert copied(seen.finished[0]) == job.finished[0]
    assert list(job.groups) == [0] and job.groups[0].turn == 0 and job.finished[0][0].turn == 0
    shown = read_only(array := np.arange(3.0))
    with pytest.raises(ValueError):
        shown.setflags(write=True)
    assert (shown == array).all() and not read_only(array[::2]).flags.writeable
