"""A progress bar over a run's training steps (an observer of ``drive``)."""

from __future__ import annotations

from collections.abc import Callable

from tqdm import tqdm

from marlaas.core.work import Decision, Train, WorkDone


class StepProgress:
    """Counts finished training steps; ``postfix()`` may add figures (e.g. rewards)."""

    def __init__(
        self,
        total_steps: int,
        desc: str,
        enabled: bool = True,
        postfix: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.bar = tqdm(total=total_steps, unit="step", desc=desc, disable=not enabled)
        self.postfix = postfix

    def __call__(self, decision: Decision, event: WorkDone, now: float) -> None:
        """Advance by one on every successful training step."""
        if isinstance(decision, Train) and event.ok:
            if self.postfix is not None:
                self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()

    def __enter__(self) -> StepProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
