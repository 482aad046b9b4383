"""durations: parse and format compact human durations like ``1h30m``."""

from durations.errors import DurationError
from durations.formatting import format_duration
from durations.parser import parse_duration

__all__ = ["DurationError", "format_duration", "parse_duration"]
