"""textkit: slugs, case conversion and truncation helpers."""

from textkit.case import camel_case, kebab_case, snake_case
from textkit.slug import slugify
from textkit.truncate import truncate_words

__all__ = ["camel_case", "kebab_case", "slugify", "snake_case", "truncate_words"]
