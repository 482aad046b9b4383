"""The error raised for text that is not a duration."""


class DurationError(ValueError):
    """The text is not a valid duration, or a value cannot be formatted."""
