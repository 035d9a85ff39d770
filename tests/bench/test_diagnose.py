"""bench.diagnose on tiny random models: the report's shape, and recheck's promise in it."""
import json

from bench import diagnose as D


def test_diagnose_reports_each_token_kind(capsys):
    assert D.main(["--models", "tiny", "--samples", "3", "--methods", "mulo_islands", "--recheck", "0", "16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ar"]["tokens"] == 3 * 16 and out["ar"]["zero"] == 0.0     # AR never samples outside top-k
    for name in ("mulo_islands recheck=0", "mulo_islands recheck=16"):
        kinds = out["methods"][name]
        assert set(kinds) == {"accepted", "rejected", "neighbour"}
        assert sum(k["tokens"] for k in kinds.values()) == 3 * 16
    assert out["recheck"]["mulo_islands recheck=0"] == {"rounds_per_image": 0.0, "exhausted_steps_per_image": 0.0}
    accepted = out["methods"]["mulo_islands recheck=16"]["accepted"]
    assert accepted["tokens"] == 0 or accepted["below_tau"] == 0.0           # recheck leaves no stale acceptance


def test_diagnose_recheck_scope_all_leaves_no_impossible_token(capsys):
    assert D.main(["--models", "tiny", "--samples", "3", "--methods", "mulo_islands", "--recheck", "0", "16",
                   "--recheck-scope", "drafts", "all"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["methods"]) == {"mulo_islands recheck=0", "mulo_islands recheck=16",
                                   "mulo_islands recheck=16 scope=all"}
    for kind in out["methods"]["mulo_islands recheck=16 scope=all"].values():
        assert kind["tokens"] == 0 or kind["zero"] == 0.0
