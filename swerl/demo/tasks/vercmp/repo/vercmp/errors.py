"""Errors for text that is not a version or a specifier."""


class InvalidVersion(ValueError):
    """The text is not a dotted release version."""


class InvalidSpecifier(ValueError):
    """The text is not a version specifier such as ``>=1.2``."""
