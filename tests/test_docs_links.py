"""Every relative link of the user documents (README.md, CHANGELOG.md, ARCHITECTURE.md, docs/*.md) resolves to a
file or folder of the repository."""

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


def documents() -> list[Path]:
    """The documents whose links are checked: README.md, CHANGELOG.md, ARCHITECTURE.md and docs/*.md."""
    paths = [ROOT / name for name in ("README.md", "CHANGELOG.md", "ARCHITECTURE.md")]
    return [p for p in paths if p.exists()] + sorted((ROOT / "docs").glob("*.md"))


def relative_links(text: str) -> list[str]:
    """The relative link targets of a markdown text (fenced code blocks, external URLs and ``#anchor`` links
    left out), without their ``#anchor`` part."""
    text = _FENCE.sub("", text)
    targets = _LINK.findall(text) + _REFERENCE.findall(text)
    out = []
    for target in targets:
        if target.startswith(_EXTERNAL) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links of the markdown file ``path`` whose target does not exist (resolved from its folder)."""
    return [t for t in relative_links(path.read_text(encoding="utf-8")) if not (path.parent / t).exists()]


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
    (tmp_path / "there.md").write_text("x")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](there.md) [ok too](there.md#part) [web](https://example.org/x) [anchor](#top)\n"
                   "![missing](figures/nothing.png) [gone](docs/gone.md#a)\n"
                   "```\n[in code](not/checked.md)\n```\n[ref]: missing/ref.md\n")
    assert broken_links(doc) == ["figures/nothing.png", "docs/gone.md", "missing/ref.md"]
