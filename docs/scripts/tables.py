"""An MkDocs hook: the tables made from the package's registries when the site is built, where
a page holds their marker: the parallel strategies (``<!-- strategies -->``, from the classes in
QuantumGravPy/parallel/strategies/), the task kinds with their metrics (``<!-- task-kinds
-->``, from QuantumGravPy/tasks/), the kinds of embedded data (``<!-- data-kinds -->``,
from QuantumGravPy/embedded/) and the file formats (``<!-- file-formats -->``, from
QuantumGravPy/data/sources/formats/).

A new strategy or task kind appears in its table without an edit here or in the page.
"""

from __future__ import annotations

from QuantumGravPy import embedded, tasks
from QuantumGravPy.data.sources import formats
from QuantumGravPy.parallel import strategies

TABLES = {
    "<!-- strategies -->": strategies.reference_markdown,
    "<!-- task-kinds -->": tasks.reference_markdown,
    "<!-- data-kinds -->": embedded.reference_markdown,
    "<!-- file-formats -->": formats.reference_markdown,
}


def on_page_markdown(markdown: str, **kwargs) -> str:
    for marker, table in TABLES.items():
        if marker in markdown:
            markdown = markdown.replace(marker, table())
    return markdown
