"""Exceptions raised for page numbers that cannot be served."""


class InvalidPage(Exception):
    """Base class for every page-number error."""


class PageNotAnInteger(InvalidPage):
    """The requested page number is not an integer."""


class EmptyPage(InvalidPage):
    """The requested page number is outside the available pages."""
