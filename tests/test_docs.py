"""Docs live in the repo: nothing cites a document a clone does not contain, and every
"docs/DESIGN.md section N.M" citation names a section that exists.

The project's working notes (the specification, the upstream reference facts, the style guide,
the runtime notes) sit outside the repository; docs/DESIGN.md restates what the code needs from
them, and code, tests and scripts cite its sections instead.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESIGN = os.path.join(ROOT, "docs", "DESIGN.md")

# Citations of documents outside the repo. \bSPEC\b leaves names like HORDE_SPEC or SPECIAL alone.
OUTSIDE = re.compile(r"\bSPEC\b|upstream-facts|(?<![\w./-])shared/|comfyui-runtime\.md|STYLE\.md")
# Not scanned: the docs themselves, run artefacts, and this file (it spells the patterns out).
SKIP_DIRS = ("docs/", "outputs/", ".git/")
SELF = "tests/test_docs.py"
# Files allowed to keep an outside citation for now; each must still have one (last test).
PENDING = {
}
NUMBER = r"\d+(?:\.\d+)?"
# "section 2.4", "sections 2.4-2.6, 5.3 and 5.6"
SECTION_REF = re.compile(rf"\bsections? ({NUMBER}(?:(?:\s*[-,]\s*|\s+and\s+){NUMBER})*)")


def repo_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files, relative to the root."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(ROOT) for f in fs]
    return sorted(f for f in files if not f.startswith(SKIP_DIRS) and os.path.isfile(os.path.join(ROOT, f)))


def text(rel: str) -> str | None:
    path = os.path.join(ROOT, rel)
    if os.path.getsize(path) > 2_000_000:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        return None   # binary (images, weights)


def design_sections() -> set[str]:
    with open(DESIGN, encoding="utf-8") as f:
        return {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", f.read(), re.M)}


def test_nothing_cites_documents_outside_the_repo():
    bad = []
    for rel in repo_files():
        if rel in PENDING or rel == SELF:
            continue
        body = text(rel)
        if body is None:
            continue
        for n, line in enumerate(body.splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{rel}:{n}: {line.strip()[:120]}")
    assert not bad, "cite a section of docs/DESIGN.md (or docs/RUNTIME.md) instead:\n" + "\n".join(bad)


def cited_sections(rel: str, line: str) -> list[str]:
    """Section numbers a line cites: in DESIGN.md every "section N.M"; elsewhere those after "DESIGN.md"
    on the line ("docs/DESIGN.md section 5.4 ... (section 2.2)" cites both)."""
    if rel != "docs/DESIGN.md":
        if "DESIGN.md" not in line:
            return []
        line = line[line.index("DESIGN.md"):]
    return [x for m in SECTION_REF.finditer(line) for x in re.findall(NUMBER, m.group(1))]


def test_design_citations_name_existing_sections():
    sections = design_sections()
    assert {"2.4", "5.3", "7.4", "10.4"} <= sections, sorted(sections)
    bad = []
    for rel in repo_files() + ["docs/DESIGN.md"]:
        body = text(rel)
        if body is None or "DESIGN.md" not in body and rel != "docs/DESIGN.md":
            continue
        for n, line in enumerate(body.splitlines(), 1):
            bad += [f"{rel}:{n}: section {x}" for x in cited_sections(rel, line) if x not in sections]
    assert not bad, "citations of sections docs/DESIGN.md does not have:\n" + "\n".join(sorted(set(bad)))


def test_pending_exceptions_still_exist():
    """An exception for a file that no longer cites outside documents should be removed."""
    for rel in PENDING:
        body = text(rel)
        assert body is not None and OUTSIDE.search(body), f"{rel} no longer needs its exception: remove it from PENDING"
