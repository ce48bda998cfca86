"""A user-defined environment loaded by import path in the tests."""

from marlaas.envs import Environment, StepResult


class EchoEnv(Environment):
    """Reward 1 when the action repeats the prompt."""

    async def reset(self, seed: int) -> str:
        self.prompt = f"say {seed}"
        return self.prompt

    async def step(self, action: str) -> StepResult:
        return StepResult("", float(action == self.prompt), True)


class NotAnEnv:
    """Not an Environment subclass."""
