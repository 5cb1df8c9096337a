"""The course cites only what a learner has, and speaks to the learner.

A lesson, a module or a doc that names a file of this repository names one that exists; a
Markdown file it names by itself (``SOMETHING.md``) is in the repository; nothing in the product
talks about the work that built it ("the issue", a design file); and ``docs/sources.md`` lists
what every lesson checked its claims against.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
URL = re.compile(r"https?://\S+")
# a path into this repository: data/..., docs/..., labkit/..., notebooks/... (also ../data/ from a notebook);
# a glob (notebooks/NN_*.ipynb) names a pattern, not a file
REPO_PATH = re.compile(r"(?<![\w/.:-])(?:\.\./)?((?:data|docs|labkit|notebooks|tests|scripts|\.ci)/[\w./*-]*[\w*])")
MD_NAME = re.compile(r"(?<![\w/.-])([A-Za-z][\w-]*\.md)\b")
WORKFLOW_WORDS = re.compile(r"\bthe issue\b|\bissue's\b|\bthe audit\b|\bFACTS\.md\b|\bERRATA\b|\bcourse notes\b"
                            r"|\bthe goal we were given\b|\bshared/design\b", re.IGNORECASE)
TEXT_SUFFIXES = (".py", ".md", ".yml", ".yaml", ".sh", ".toml", ".cfg", ".txt", ".csv")


def _repo_files() -> set[str]:
    """Tracked files and untracked ones git does not ignore: what a fresh clone would have."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {line for line in out.splitlines() if (ROOT / line).is_file()}


FILES = _repo_files()
NAMES = {Path(f).name for f in FILES}


def _product_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every notebook cell, module, doc and data note a learner reads."""
    for f in sorted(FILES):
        if f.startswith(("tests/", ".ci/")):
            continue
        path = ROOT / f
        if f.endswith(".ipynb"):
            for i, cell in enumerate(json.loads(path.read_text())["cells"]):
                yield f"{f} cell {i}", "".join(cell["source"])
        elif f.endswith(TEXT_SUFFIXES) or f in ("Makefile", "README"):
            yield f, path.read_text(errors="replace")


TEXTS = list(_product_texts())


def _exists(ref: str) -> bool:
    ref = ref.rstrip("/")
    return ref in FILES or any(f.startswith(ref + "/") for f in FILES)


def test_the_scan_sees_the_course() -> None:
    notebooks = {where.split(" cell ")[0] for where, _ in TEXTS if " cell " in where}
    assert len([n for n in notebooks if n.startswith("notebooks/")]) >= 16
    assert any(where.startswith("labkit/") for where, _ in TEXTS)


def test_every_repository_path_cited_exists() -> None:
    missing = [(where, m.group(1)) for where, text in TEXTS for m in REPO_PATH.finditer(URL.sub("", text))
               if "*" not in m.group(1) and not _exists(m.group(1).rstrip("."))]
    assert not missing, f"cited but not in the repository: {missing}"


def test_every_markdown_file_named_is_in_the_repository() -> None:
    missing = [(where, m.group(1)) for where, text in TEXTS for m in MD_NAME.finditer(URL.sub("", text))
               if m.group(1) not in NAMES]
    assert not missing, f"a learner does not have these files: {missing}"


def test_no_workflow_words_in_the_product() -> None:
    found = [(where, m.group(0)) for where, text in TEXTS for m in WORKFLOW_WORDS.finditer(URL.sub("", text))]
    assert not found, f"words about the work, not the lesson: {found}"


@pytest.mark.parametrize("text, hits", [
    ("as the issue asks", 1), ("the issue's goal: 30x", 1), ("this issue's goal", 1), ("see FACTS.md row 4", 1),
    ("the issues of scale", 0), ("an issue thread on GitHub", 0),
])
def test_the_workflow_pattern(text: str, hits: int) -> None:
    assert len(WORKFLOW_WORDS.findall(text)) == hits


def test_the_sources_list_covers_every_lesson() -> None:
    sources = (ROOT / "docs" / "sources.md").read_text()
    lessons = sorted(Path(f).name[:2] for f in FILES if re.fullmatch(r"notebooks/\d\d_\w+\.ipynb", f))
    assert len(lessons) >= 16
    missing = [n for n in lessons if not re.search(rf"^## {n} ", sources, re.MULTILINE)]
    assert not missing, f"docs/sources.md has no section for lessons {missing}"
    assert len(URL.findall(sources)) >= 40, "the sources list should link its sources"
