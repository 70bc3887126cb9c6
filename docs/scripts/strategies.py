"""An MkDocs hook: the table of parallel strategies, made from their classes when the site is
built, where a page says ``<!-- strategies -->``.

Each strategy is one class in QuantumGravPy/parallel/strategies/ whose docstring says what it
does (its first paragraph) and what it refuses (its paragraph "Refuses ..."): a new one appears
in the table without an edit here or in the page.
"""

from __future__ import annotations

from QuantumGravPy.parallel.strategies import reference_markdown

MARKER = "<!-- strategies -->"


def on_page_markdown(markdown: str, **kwargs) -> str:
    return markdown.replace(MARKER, reference_markdown()) if MARKER in markdown else markdown
