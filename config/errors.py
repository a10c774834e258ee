"""The error every config reader raises: one line per problem, each naming its place and key."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration is invalid. ``errors`` holds one line per problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.errors)
        head = f"{self.source}: {n} configuration error{'s' if n != 1 else ''}:"
        return "\n".join([head] + [f"  - {e}" for e in self.errors])
