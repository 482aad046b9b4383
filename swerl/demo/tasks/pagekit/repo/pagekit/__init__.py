"""pagekit: paginate sequences into numbered pages."""

from pagekit.errors import EmptyPage, InvalidPage, PageNotAnInteger
from pagekit.page import Page
from pagekit.paginator import Paginator

__all__ = ["EmptyPage", "InvalidPage", "Page", "PageNotAnInteger", "Paginator"]
