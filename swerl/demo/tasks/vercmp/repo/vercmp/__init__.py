"""vercmp: compare release versions and match version specifiers."""

from vercmp.errors import InvalidSpecifier, InvalidVersion
from vercmp.specifier import Specifier, SpecifierSet
from vercmp.version import Version

__all__ = ["InvalidSpecifier", "InvalidVersion", "Specifier", "SpecifierSet", "Version"]
