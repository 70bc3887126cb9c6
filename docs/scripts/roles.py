"""An MkDocs hook: the Sphinx roles of the package's docstrings, shown as code.

The docstrings name other objects the way Sphinx does (``:class:`~QuantumGravPy.config.Config```);
mkdocstrings renders them as markdown, which leaves ``:class:`` in front of the code. This turns
``:role:<code>~a.b.Name</code>`` into ``<code>Name</code>`` (and ``:role:<code>a.b</code>`` into
``<code>a.b</code>``) in the rendered pages.
"""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match) -> str:
    short, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(_code, html)
