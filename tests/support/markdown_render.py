"""What a Markdown renderer shows of a text (Prefect's UI renders form descriptions and artifacts as Markdown
and drops HTML it does not know): markdown-it (CommonMark, raw HTML on), then the visible text."""

from __future__ import annotations

from html.parser import HTMLParser

# the tags Markdown itself produces: anything else came from the text and a sanitiser removes it
MARKDOWN_TAGS = frozenset({"p", "code", "pre", "strong", "em", "a", "ul", "ol", "li", "table", "thead", "tbody", "tr",
                           "th", "td", "h1", "h2", "h3", "h4", "h5", "h6", "br", "hr", "blockquote", "img", "del", "s"})


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.foreign: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in MARKDOWN_TAGS:
            self.foreign.append(tag)

    def handle_data(self, data):
        self.parts.append(data)


def rendered(text: str) -> tuple[str, list[str]]:
    """(the visible text, the tags that are not Markdown's: each one is text a renderer eats)."""
    from markdown_it import MarkdownIt

    parser = _Text()
    parser.feed(MarkdownIt("commonmark", {"html": True}).enable("table").render(text))
    return "".join(parser.parts), parser.foreign
