"""Check a project venv (run by scripts/setup_env.sh with that venv's python, `python -I`).

    python -I scripts/check_venv.py --repo REPO [--constraints constraints.txt]

Prints one line per problem and exits:
  0  nothing to do;
  1  an installed package differs from the version CONSTRAINTS pins (someone changed the venv after
     set-up, or it holds another recipe): setup_env.sh refuses the venv;
  3  `mulosd_core` does not import from REPO (the editable install is missing or points at another
     clone): setup_env.sh reinstalls it.
Packages the constraints pin but the venv lacks are not problems (ComfyUI's own requirements arrive
later, from setup_comfyui.sh).
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import os
import re
import sys


def normalise(name: str) -> str:
    """PEP 503 name: case and runs of -_. do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: str) -> dict[str, str]:
    """name -> version of every `name==version` line (comments and other specifiers ignored)."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)\s*(;.*)?", line)
            if m:
                pins[normalise(m.group(1))] = m.group(2)
    return pins


def installed_versions() -> dict[str, str]:
    """name -> version of every distribution the running interpreter sees (first one on the path wins)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalise(name), dist.version)
    return found


def version_problems(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    return [f"{name} is {installed[name]}, the constraints pin {want}"
            for name, want in sorted(pins.items()) if name in installed and installed[name] != want]


def library_problem(repo: str) -> str | None:
    spec = importlib.util.find_spec("mulosd_core")
    want = os.path.realpath(os.path.join(repo, "mulosd_core", "__init__.py"))
    if spec is None or spec.origin is None:
        return "mulosd_core is not installed"
    if os.path.realpath(spec.origin) != want:
        return f"mulosd_core imports from {os.path.dirname(spec.origin)}, not from {os.path.dirname(want)}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--constraints")
    args = ap.parse_args(argv)
    if args.constraints:
        problems = version_problems(read_pins(args.constraints), installed_versions())
        if problems:
            print("\n".join(problems))
            return 1
    problem = library_problem(args.repo)
    if problem:
        print(problem)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
