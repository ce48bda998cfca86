"""The workloads split-progress was checked on beyond traces/ (benchmarks/unseen_workloads.py):
each is what docs/policies.md says it is, and loads."""

from __future__ import annotations

from benchmarks.unseen_workloads import PAPER_32, main
from marlaas.core.jobs import JobState
from marlaas.workload_file import load_workload


def test_the_unseen_workloads_are_paper_32_rescaled(tmp_path):
    assert main(["--out", str(tmp_path)]) == 0
    paper = load_workload(PAPER_32)
    made = {name: load_workload(tmp_path / f"{name}.yaml") for name in
            ("new1", "new2", "steps2", "steps-half")}  # fmt: skip
    steps = {job.name: job.rl.steps for job in paper.jobs}
    assert [job.name for job in made["new1"].jobs] == [job.name for job in paper.jobs[1::2]]
    pools = {pool.role: pool.devices for pool in made["new1"].cluster.pools}
    assert pools == {"inference": 16, "training": 8}
    new2 = made["new2"].jobs
    assert len(new2) == 20 and not any(job.name.startswith("tool") for job in new2)
    assert {job.weight for job in new2} == {1.0}
    for scaled, factor in (("steps2", 2), ("steps-half", 0.5)):
        jobs = made[scaled].jobs
        assert [job.name for job in jobs] == list(steps)
        assert all(job.rl.steps == -(-steps[job.name] * factor // 1) for job in jobs)
    # at half the steps paper-32's code-L jobs (729 s) fall below the fixed 1,200 s bound
    # split-progress had for a big job until 2026-12-06 (a share of the run's span since)
    longest = max(JobState(job, i, 1).alone_s for i, job in enumerate(made["steps-half"].jobs))
    assert 700 < longest < 1200


def test_the_random_workloads_are_seeded_by_their_number_and_within_their_ranges(tmp_path):
    assert main(["--out", str(tmp_path), "--random", "4"]) == 0
    first = (tmp_path / "rand-2.yaml").read_text()
    assert main(["--out", str(tmp_path / "again"), "--random", "3"]) == 0
    assert (tmp_path / "again" / "rand-2.yaml").read_text() == first  # the same number: the same
    made = [load_workload(tmp_path / f"rand-{k}.yaml") for k in range(4)]
    assert len({tuple(job.name for job in w.jobs) for w in made}) == 4  # each its own draw
    kinds = {job.name.split("-")[0] for job in load_workload(PAPER_32).jobs}
    for workload in made:
        assert 6 <= len(workload.jobs) <= 32
        assert {job.name.split("-")[0] for job in workload.jobs} <= kinds
        assert len({job.tenant for job in workload.jobs}) == len(workload.jobs)
        train = next(p.devices for p in workload.cluster.pools if p.role == "training")
        assert train % 4 == 0
    assert not (tmp_path / "rand-4.yaml").exists()
