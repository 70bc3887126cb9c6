"""The voice of the README and the site's pages: short sentences, and nothing that dates them.

A user page says what the library does and how to use it, in sentences of under 16 words on
average. It names no measurement date, no machine (a CPU or GPU model) and no fix history: those
belong to BENCHMARKS.md and STUDIES.md, which record the runs, and to the commit log. Only the
tables of docs/benchmarks.md may name the machine and the date a figure was measured on.
"""

import re

import pytest
import yaml
from conftest import ROOT

MAX_MEAN_WORDS = 16

# docs/config.md is the generated configuration reference: `python -m QuantumGravPy.config.docs
# --write docs/config.md` writes it from the schema's docstrings, so its sentences are those of
# the package's code, not of a page written by hand. It is still checked for dates and machines.
GENERATED = {"config.md"}

MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
DATE = re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b(?:{MONTHS})\.? +(?:\d{{1,2}}, +)?\d{{4}}\b")
MACHINE = re.compile(
    r"\b(?:Xeon|EPYC|Ryzen|Threadripper|Opteron|Core ?i[3579]|Apple M[1-9]|Graviton|Neoverse"
    r"|[AHVBLT]\d{2,3}[a-z]?|GH200|GB200|MI[123]\d{2}X?|RTX|GTX|Tesla|Quadro|GeForce)\b"
)


def nav_pages() -> list[str]:
    """The Markdown pages in mkdocs.yml's nav, as paths under docs/."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = [page for entry in nav for page in entry.values()]
    return [page for page in pages if page.endswith(".md")]


def page_text(page: str) -> str:
    """A page as its reader sees it: a page that is only a root file's include is that file."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    included = re.fullmatch(r'--8<-- "([^"]+)"\n', text)
    return (ROOT / included.group(1)).read_text(encoding="utf-8") if included else text


def without_markup(text: str) -> str:
    """The prose: no code blocks, inline code, tables, HTML comments, headings or link URLs."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"^( *)(```|~~~).*?^\1\2[^\n]*$", " ", text, flags=re.S | re.M)
    text = re.sub(r"``[^`]+``|`[^`\n]+`", " ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("|", "#", "--8<--", ":::")):
            continue
        lines.append(line)
    return "\n".join(lines)


def sentences(text: str) -> list[str]:
    """Sentences: each list item and each paragraph split on . ! ? before a space or the end."""
    found = []
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.) )", without_markup(text))
    for block in blocks:
        for sentence in re.split(r"(?<=[.!?])[)\]\"']*\s+", " ".join(block.split())):
            if re.search(r"\w", sentence):
                found.append(sentence)
    return found


def mean_words(text: str) -> float:
    found = sentences(text)
    words = sum(len(re.findall(r"[\w'’.,/+-]*\w", s)) for s in found)
    return words / max(len(found), 1)


VOICED = ["README.md"] + [f"docs/{page}" for page in nav_pages() if page not in GENERATED]


def test_the_sentence_counter_counts_what_a_reader_reads():
    text = (
        "# A heading of many words that are not a sentence\n\n"
        "One two three. Four five!\n\n"
        "```python\nx = 1. y = 2. z = 3.\n```\n\n"
        "- an item\n- another item, with `inline code. here` in it\n\n"
        "| a table | of cells. |\n|---|---|\n| one. | two. |\n\n"
        "<!-- a marker. -->\n"
        "See [the page](docs/a.very.long.path/index.md) now.\n"
    )
    assert sentences(text) == [
        "One two three.",
        "Four five!",
        "- an item",
        "- another item, with in it",
        "See the page now.",
    ]


@pytest.mark.parametrize("path", VOICED)
def test_a_page_averages_under_16_words_a_sentence(path):
    text = page_text(path[len("docs/") :]) if path.startswith("docs/") else read(path)
    mean = mean_words(text)
    assert mean < MAX_MEAN_WORDS, f"{path}: {mean:.1f} words a sentence (at most {MAX_MEAN_WORDS})"


def read(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def outside_tables(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))


@pytest.mark.parametrize("path", ["README.md"] + [f"docs/{page}" for page in nav_pages()])
def test_a_page_names_no_date_and_no_machine(path):
    text = page_text(path[len("docs/") :]) if path.startswith("docs/") else read(path)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)  # generators stamp their markers
    if path == "docs/benchmarks.md":
        text = outside_tables(text)  # a measured figure's table names where and when
    for pattern, what in ((DATE, "date"), (MACHINE, "machine name")):
        found = pattern.search(text)
        assert not found, f"{path}: the {what} {found.group(0)!r} (put it in BENCHMARKS.md)"


def test_the_checks_catch_dates_and_machines():
    assert DATE.search("measured on 2025-03-14") and DATE.search("in March 2026")
    assert DATE.search("Nov 2026") and not DATE.search("2,048 elements in 2 GB")
    for name in ("Intel Xeon", "AMD EPYC", "Ryzen 9", "Core i7", "Apple M2", "A100", "H200", "RTX"):
        assert MACHINE.search(f"on a {name} machine"), name
    assert not MACHINE.search("an H-dimensional space with 100 elements on 2 processes")
