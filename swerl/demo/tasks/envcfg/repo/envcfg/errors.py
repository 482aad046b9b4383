"""Exceptions raised for unusable configuration."""


class ConfigError(Exception):
    """Base class for every configuration problem."""


class MissingSetting(ConfigError, KeyError):
    """A required variable is not set.

    It is also a ``KeyError`` so that code written against a plain mapping
    keeps working.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"required setting {self.name} is not set"
