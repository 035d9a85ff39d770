"""The README's results section is what `bench.report` generates from the committed benchmark JSON,
so the table and the raw numbers cannot drift apart."""
from pathlib import Path

from bench import report as R

ROOT = Path(__file__).resolve().parents[2]


def test_readme_results_are_those_of_the_committed_benchmark(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert (ROOT / "bench" / "results" / "cpu-embedded.json").is_file()
    assert R.main(["--check"]) == 0
