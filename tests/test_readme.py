"""README.md is the user's document: the two commands first, short, every link and path it names exists,
and nothing it says about the environment has gone stale."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 250
TOP = "```bash\nbash scripts/demo.sh   # demo\nbash scripts/test.sh   # tests\n```\n"


def text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_two_commands_come_first():
    assert text().startswith(TOP)
    for script in ("scripts/demo.sh", "scripts/test.sh"):
        assert (ROOT / script).is_file()


def test_short_and_in_the_users_order():
    body = text()
    assert len(body.splitlines()) <= MAX_LINES
    heads = [h for h in re.findall(r"^## (.+)$", body, re.M)]
    order = ["Install", "The demo and the tests", "Nodes", "Using real LlamaGen and Janus-Pro checkpoints",
             "The library", "Status"]
    assert [h for h in heads if h in order] == order, heads
    first_screen = body[:body.index("## Install")]
    assert "docs/images/demo.png" in first_screen and "quality tier" in first_screen
    assert "docs/RESULTS.md" in first_screen


def headings(md: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for h in re.findall(r"^#+ (.+)$", md, re.M):
        h = re.sub(r"[`*]", "", h).strip().lower()
        out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", h)))
    return out


def links(md: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", md)


def test_links_and_anchors_exist():
    """Relative links of README.md and of the docs it sends readers to resolve, anchors included."""
    bad = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        md = page.read_text(encoding="utf-8")
        for link in links(md):
            if re.match(r"[a-z]+://", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                bad.append(f"{page.name}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in headings(target.read_text(encoding="utf-8")):
                bad.append(f"{page.name}: {link} (no such heading)")
    assert not bad, bad


def test_paths_it_names_exist():
    """Backticked repository paths (files and folders) in README.md exist: e.g. no `workflows/` left."""
    missing = []
    for p in re.findall(r"`((?:example_workflows|scripts|bench|docs|mulosd_core|models|nodes|tests)/[^`\s]*)`", text()):
        if not (ROOT / p).exists():
            missing.append(p)
    assert not missing, missing
    assert not re.search(r"(?<![\w_])workflows/", text()), "the example graphs live in example_workflows/"


def test_environment_lines_are_current():
    body = text()
    assert "XDG_CACHE_HOME" in body                     # the cache folder honours it (mulosd_core/devenv.py)
    assert "6.6 GB" in body and "root" in body
    assert "newest frontend" in body and "docs/RUNTIME.md" in body
