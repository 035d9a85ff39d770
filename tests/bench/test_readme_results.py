"""The README's results section is what `bench.report` generates from the committed benchmark JSON,
so the table and the raw numbers cannot drift apart."""
from pathlib import Path

from bench import report as R

ROOT = Path(__file__).resolve().parents[2]


def test_readme_results_are_those_of_the_committed_benchmark(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert R.default_results(str(ROOT / "bench" / "results")) is not None
    assert R.main(["--check"]) == 0
