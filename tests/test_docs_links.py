"""Every link in the README and the manual resolves: the file exists, and so does the heading
an ``#anchor`` names (GitHub's heading slugs). The repository stands on its own: code and docs
cite public sources or the repository's own pages (``docs/facts.md#section``), whose anchors
must exist too, never notes kept outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INDENTED = re.compile(r"(?:^(?: {4}|\t).*\n?)+", re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
_EXTERNAL = ("http://", "https://", "mailto:", "figure:", "data:")
#: A mention of a docs page with an anchor in code or comments: ``docs/facts.md#deepseek-ocr``.
_DOCS_ANCHOR = re.compile(r"\bdocs/([\w./-]+\.md)#([\w-]+)")
#: Notes that live outside the repository (the project's working notes and the machine's shared
#: folder): its readers do not have them. Spelt in pieces so that this file does not match itself.
_OUTSIDE = re.compile("|".join(("FACTS" + r"\.md", "DESIGN" + r"\.md", r"\.\./shared" + "/", "/work/" + "shared")))
#: Where a citation of those would reach a reader.
_CITING_PARTS = ("llm_ocr/", "tests/", "docs/", "scripts/", "notebooks/", "examples/", "README.md")


def markdown_files(root: Path = REPO) -> list[Path]:
    """The Markdown files git knows of (tracked or new, not ignored): README, docs/, platform folders."""
    return tracked_files(root, ("*.md",))


def tracked_files(root: Path = REPO, parts: tuple[str, ...] = _CITING_PARTS) -> list[Path]:
    """The files git knows of (tracked or new, not ignored) under ``parts`` (folders or files)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *parts],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    return [root / name for name in listed if name and (root / name).is_file()]


def outside_citations(paths: list[Path], root: Path = REPO) -> list[str]:
    """``file:line: text`` of every line of ``paths`` that cites a note kept outside the repository."""
    found = []
    for path in paths:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append(f"{path.relative_to(root).as_posix()}:{number}: {line.strip()[:120]}")
    return found


def broken_docs_anchors(paths: list[Path], root: Path = REPO) -> list[str]:
    """``docs/PAGE.md#anchor`` mentions in ``paths`` whose page or heading does not exist."""
    problems = []
    for path in paths:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for page, anchor in _DOCS_ANCHOR.findall(text):
            dest = root / "docs" / page
            where = path.relative_to(root).as_posix()
            if not dest.is_file():
                problems.append(f"{where}: docs/{page}#{anchor} (no such file)")
            elif anchor not in anchors(dest):
                problems.append(f"{where}: docs/{page}#{anchor} (no heading #{anchor} in {page})")
    return problems


def _prose(text: str) -> str:
    """The text without code (fenced blocks, indented blocks, code spans): links there are examples."""
    text = _FENCE.sub("", text)
    text = _INDENTED.sub("", text)
    return _CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """Links of ``path`` whose file or heading does not exist (named relative to ``root``)."""
    problems = []
    for target in _LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if target.startswith(_EXTERNAL):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{path.relative_to(root)}: {target} (no such file)")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{path.relative_to(root)}: {target} (no heading #{anchor} in {dest.name})")
    return problems


def test_the_readme_and_the_manual_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in markdown_files()}
    assert "README.md" in names and "docs/stages.md" in names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "stages.md").write_text("# Stages\n\n## `llm-ocr extract`\n", encoding="utf-8")
    page = tmp_path / "docs" / "probe.md"
    page.write_text(
        "# Probe\n\n[ok](#probe) [gone](nowhere.md) [bad anchor](stages.md#no-such-heading) "
        "[fine](stages.md#llm-ocr-extract)\n\n    [in code](nowhere.md)\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == [
        "docs/probe.md: nowhere.md (no such file)",
        "docs/probe.md: stages.md#no-such-heading (no heading #no-such-heading in stages.md)",
    ]


def test_slugs_follow_github() -> None:
    assert slug("`llm-ocr run`: every stage in one process") == "llm-ocr-run-every-stage-in-one-process"
    assert slug("What happens when…") == "what-happens-when"
    assert slug("Storage: local disk, S3, Google Cloud Storage and the Hugging Face Hub") == (
        "storage-local-disk-s3-google-cloud-storage-and-the-hugging-face-hub"
    )


def test_nothing_cites_notes_kept_outside_the_repository() -> None:
    assert outside_citations(tracked_files()) == []


def test_every_docs_anchor_named_in_code_exists() -> None:
    """Code and tests point at ``docs/PAGE.md#anchor`` in comments; a renamed heading breaks them."""
    here = Path(__file__).resolve()  # its own mentions are examples
    code = [p for p in tracked_files() if p.suffix != ".md" and p != here]
    assert any(p.name == "gpu_presets.py" for p in code)
    assert broken_docs_anchors(code) == []


def test_the_citation_checks_find_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "facts.md").write_text("# Facts\n\n## DeepSeek-OCR\n", encoding="utf-8")
    code = tmp_path / "probe.py"
    outside = "FACTS" + ".md"
    code.write_text(
        f"# context 8192 ({outside}, DeepSeek-OCR)\n# docs/facts.md#deepseek-ocr\n"
        "# docs/facts.md#no-such-heading\n# docs/gone.md#x\n# see ../shared" + "/notes\n",
        encoding="utf-8",
    )
    assert outside_citations([code], tmp_path) == [
        f"probe.py:1: # context 8192 ({outside}, DeepSeek-OCR)",
        "probe.py:5: # see ../shared" + "/notes",
    ]
    assert broken_docs_anchors([code], tmp_path) == [
        "probe.py: docs/facts.md#no-such-heading (no heading #no-such-heading in facts.md)",
        "probe.py: docs/gone.md#x (no such file)",
    ]
