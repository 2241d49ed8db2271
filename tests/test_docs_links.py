"""Every relative link of the user documents (README.md, CHANGELOG.md, ARCHITECTURE.md, docs/*.md and the
benchmark reports) resolves to a file or folder of the repository, and every ``#anchor`` into a markdown file to
one of its headings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: ``[text](target)`` and ``![alt](target)``; the target ends at the first space or closing parenthesis.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions.
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_EXTERNAL = ("http://", "https://", "mailto:", "ftp://")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def documents() -> list[Path]:
    """The documents whose links are checked: README.md, CHANGELOG.md, ARCHITECTURE.md and docs/*.md."""
    paths = [ROOT / name for name in ("README.md", "CHANGELOG.md", "ARCHITECTURE.md")]
    return ([p for p in paths if p.exists()] + sorted((ROOT / "docs").glob("*.md"))
            + sorted((ROOT / "benchmarks" / "results").glob("*.md")))


def link_targets(text: str) -> list[str]:
    """The link targets of a markdown text that are not external URLs (fenced code blocks left out), anchors
    included: ``docs/x.md``, ``docs/x.md#part``, ``#part``."""
    text = _FENCE.sub("", text)
    return [t for t in _LINK.findall(text) + _REFERENCE.findall(text) if not t.startswith(_EXTERNAL)]


def relative_links(text: str) -> list[str]:
    """The relative file links of a markdown text, without their ``#anchor`` part (``#anchor``-only links left
    out)."""
    return [t.split("#", 1)[0] for t in link_targets(text) if not t.startswith("#")]


def anchors(text: str) -> set[str]:
    """GitHub's anchors of the headings of a markdown text: lower case, punctuation dropped, spaces as hyphens."""
    text = _FENCE.sub("", text)
    out = set()
    for heading in _HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def broken_links(path: Path) -> list[str]:
    """The links of the markdown file ``path`` whose file (resolved from its folder) does not exist, or whose
    ``#anchor`` names no heading of the markdown file it points into."""
    broken = []
    for target in link_targets(path.read_text(encoding="utf-8")):
        name, _, anchor = target.partition("#")
        file = path if not name else path.parent / name
        if not file.exists():
            broken.append(name)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(target)
    return broken


def test_the_documents_exist():
    names = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"README.md", "CHANGELOG.md", "ARCHITECTURE.md"} <= names
    assert {"docs/operations.md", "docs/scaling.md", "docs/methods.md", "docs/benchmarks.md"} <= names
    assert (ROOT / "LICENSE").exists()


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_the_readme_links_into_docs():
    links = set(relative_links((ROOT / "README.md").read_text(encoding="utf-8")))
    for name in ("docs/operations.md", "docs/scaling.md", "docs/methods.md", "docs/benchmarks.md", "LICENSE",
                 "CHANGELOG.md"):
        assert name in links, name


def test_a_broken_link_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    (tmp_path / "there.md").write_text("# Part one\n\n## The `x` cache, again\n")
    doc.write_text("# Top\n[ok](there.md) [ok too](there.md#part-one) [web](https://example.org/x) [anchor](#top)\n"
                   "[code heading](there.md#the-x-cache-again) [no heading](there.md#part-two) [self](#nowhere)\n"
                   "![missing](figures/nothing.png) [gone](docs/gone.md#a)\n"
                   "```\n[in code](not/checked.md)\n# not a heading\n```\n[ref]: missing/ref.md\n")
    assert broken_links(doc) == ["there.md#part-two", "#nowhere", "figures/nothing.png", "docs/gone.md",
                                 "missing/ref.md"]
