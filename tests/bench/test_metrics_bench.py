"""Benchmark arithmetic: wall ratios, the target NLL, share of oracle, the sweep rule and the
consistency checker (which must catch broken results)."""
import copy
import math

import numpy as np
import pytest
import torch

from bench import quality as Q
from bench import summary as SU
from bench import tables as T
from mulosd_core.sampling import SamplingConfig
from mulosd_core.schedules import zipar_nfe


# ------------------------------------------------------------------ ratios
def test_ratio_of_medians_is_a_speed_up():
    ar = [2.0, 2.2, 1.8, 100.0]          # an outlier moves the mean, not the median
    fast = [1.0, 1.1, 0.9, 1.0]
    assert Q.ratio_of_medians(ar, fast) == pytest.approx(np.median(ar) / np.median(fast))
    assert Q.ratio_of_medians(ar, fast) == pytest.approx(2.1 / 1.0)
    assert Q.ratio_of_medians(ar, ar) == 1.0


def test_ratio_ci_is_paired_ratio_of_medians():
    ar = np.array([2.0, 4.0, 6.0])
    m = ar / 2                              # exactly twice as fast on every sample
    lo, hi = Q.ratio_ci(ar, m)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)   # paired: no spread at all
    assert Q.ratio_ci([1.0], [1.0, 2.0]) is None
    # one slow outlier moves a ratio of means but not the ratio of medians the table reports
    ar, m = np.ones(9), np.r_[np.full(8, 0.5), 50.0]
    assert Q.ratio_of_medians(ar, m) == pytest.approx(2.0)
    lo, hi = Q.ratio_ci(ar, m, n_boot=400)
    assert lo <= 2.0 <= hi and hi == pytest.approx(2.0)
    assert T.ci_statistic({"settings": {"wall_ratio_ci": Q.WALL_RATIO_CI}}) == Q.WALL_RATIO_CI
    assert T.ci_statistic({"settings": {}}) == "paired bootstrap of the ratio of means"   # older results JSON


def test_share_of_oracle():
    assert Q.share_of_oracle(1.4, 2.0) == pytest.approx(0.7)
    assert Q.share_of_oracle(2.0, 2.0) == 1.0
    assert Q.share_of_oracle(1.0, None) is None
    assert Q.share_of_oracle(None, 2.0) is None
    assert Q.share_of_oracle(1.0, 0.0) is None


def test_iqr():
    spread, q25, q75 = Q.iqr([1, 2, 3, 4, 5])
    assert (q25, q75, spread) == (2.0, 4.0, 2.0)


def test_benchmark_fd_is_metrics_frechet_distance():
    """One Frechet distance: the benchmark reports mulosd_core.metrics' value and its bootstrap, bit for bit."""
    from mulosd_core.metrics import bootstrap_ci_pair, frechet_distance
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((60, 5)), rng.standard_normal((40, 5)) * 1.3 + 0.2
    fd, ci = Q.fd_with_ci(a, b, n_boot=20)
    assert fd == frechet_distance(a, b)
    assert ci == list(bootstrap_ci_pair(a, b, frechet_distance, n_boot=20, seed=0))
    assert Q.fd_with_ci(a[:1], b) == (None, None)


# --------------------------------------------------------------------- NLL
class _FakeGPT:
    """Logits independent of position: cond rows [0, log 3], null rows [0, 0] (V = 2)."""
    num_classes = 5

    def __call__(self, tokens, cond, grid):
        B, N = tokens.shape
        null = (cond == self.num_classes)[:, None, None]
        c = torch.tensor([0.0, math.log(3.0)]).expand(B, N, 2)
        return torch.where(null, torch.zeros(B, N, 2), c)

    def null_condition(self, batch, device=None):
        return torch.full((batch,), self.num_classes, dtype=torch.long)


class _FakeTarget:
    gpt, grid, device = _FakeGPT(), 2, torch.device("cpu")


def test_nll_hand_computed():
    t = _FakeTarget()
    tokens = torch.tensor([[1, 1, 0, 1]])
    cond = torch.tensor([2])
    # no CFG: p = [1/4, 3/4]
    got = Q.target_nll(t, tokens, cond, SamplingConfig(cfg_scale=1.0))
    want = -(3 * math.log(0.75) + math.log(0.25)) / 4
    assert float(got[0]) == pytest.approx(want, rel=1e-6)
    # CFG 2: uncond + (cond - uncond) * 2 = [0, 2 log 3] -> p = [1/10, 9/10]
    got = Q.target_nll(t, tokens, cond, SamplingConfig(cfg_scale=2.0))
    assert float(got[0]) == pytest.approx(-(3 * math.log(0.9) + math.log(0.1)) / 4, rel=1e-6)
    # temperature 2 on the CFG logits: [0, log 3] -> [1/4, 3/4]
    got = Q.target_nll(t, tokens, cond, SamplingConfig(cfg_scale=2.0, temperature=2.0))
    assert float(got[0]) == pytest.approx(want, rel=1e-6)
    # top-k 1 removes token 0: its probability is floored at 1e-12
    got = Q.target_nll(t, tokens, cond, SamplingConfig(cfg_scale=1.0, top_k=1))
    assert float(got[0]) == pytest.approx(-math.log(1e-12) / 4, rel=1e-6)


def test_nll_matches_cached_step_by_step_probabilities():
    """The teacher-forced forward gives the same per-position distributions the sampler uses."""
    from mulosd_core.sampling import cfg_combine, process_logits
    from mulosd_core.testing import tiny_model
    m = tiny_model(grid=3, seed=0, num_classes=12)
    s = SamplingConfig(cfg_scale=2.0, temperature=0.8)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, m.vocab_size, (2, m.num_tokens), generator=g)
    cond = torch.tensor([3, 7])
    with torch.inference_mode():
        rows = m.condition_rows(cond, True)
        cache = m.new_cache(rows.rows)
        logits = [m.prefill(rows, cache)]
        fed = torch.cat([tokens, tokens])
        for n in range(m.num_tokens - 1):
            logits.append(m.forward_tokens(fed[:, n:n + 1], torch.tensor([n]), cache)[:, 0])
        probs = process_logits(cfg_combine(torch.stack(logits, 1), s.cfg_scale), s)
    want = -probs.gather(-1, tokens[..., None])[..., 0].clamp_min(1e-12).log().mean(-1)
    assert torch.allclose(Q.target_nll(m, tokens, cond, s), want, atol=1e-4)


# -------------------------------------------------------- consistency checker
def _method(kind, calls, wall, tokens=16, rejection="local", zipar_window=8, inv="inv"):
    cfg = {"method": kind, "verifier": {"rejection": rejection}, "zipar_window": zipar_window}
    return {"config": cfg, "target_calls": float(np.mean(calls)), "wall_ratio_vs_ar": None,
            "ratio_reference": {"invocation": inv, "method": "ar"},
            "runs": {"wall_seconds": list(wall), "target_calls": list(calls), "tokens_per_image": [tokens] * len(wall),
                     "accepted": 10 * len(wall), "resampled": (tokens - 10) * len(wall),
                     "tokens_total": tokens * len(wall), "tokens_in_range": True}}


def _valid_result():
    grid = 4
    ms = {"ar": _method("ar", [16, 16], [1.0, 1.2]),
          "zipar": _method("zipar", [zipar_nfe(grid, 2)] * 2, [0.8, 0.9], zipar_window=2),
          "mulo_islands": _method("speculative", [6, 7], [0.5, 0.6]),
          "mulo_raster": _method("speculative", [8, 9], [0.7, 0.6], rejection="raster"),
          "mulo_oracle": _method("speculative", [3, 3], [0.3, 0.3])}
    for m in ms.values():
        m["wall_ratio_vs_ar"] = Q.ratio_of_medians(ms["ar"]["runs"]["wall_seconds"], m["runs"]["wall_seconds"])
    return {"invocation": "inv", "settings": {"grid": grid, "tokens_per_image": grid * grid}, "methods": ms}


def test_checker_accepts_a_consistent_result():
    assert SU.check_consistency(_valid_result()) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda r: r["methods"]["mulo_islands"]["runs"]["tokens_per_image"].__setitem__(0, 15), "token count"),
    (lambda r: r["methods"]["mulo_islands"]["runs"].__setitem__("accepted", 3), "accepted"),
    (lambda r: r["methods"]["zipar"]["runs"]["target_calls"].__setitem__(1, 16), "zipar_nfe"),
    (lambda r: r["methods"]["mulo_islands"].__setitem__("target_calls", 2.0), "fewest"),
    (lambda r: r["methods"]["mulo_islands"].__setitem__("wall_ratio_vs_ar", 5.0), "median(AR)"),
    (lambda r: r["methods"]["mulo_islands"]["ratio_reference"].__setitem__("invocation", "other"), "this invocation"),
    (lambda r: r["methods"].pop("ar"), "no AR run"),
])
def test_checker_catches_broken_results(breakage, message):
    r = copy.deepcopy(_valid_result())
    breakage(r)
    fails = SU.check_consistency(r)
    assert fails and any(message in f for f in fails), fails


def test_checker_ignores_accept_sum_for_raster():
    r = _valid_result()
    r["methods"]["mulo_raster"]["runs"]["accepted"] = 0      # raster rows are not held to the local identity
    assert SU.check_consistency(r) == []


def test_fd_bracket_sits_above_the_point_estimate_as_the_tables_say():
    """bench.quality.FD_INTERVAL_NOTE: resampling images with replacement duplicates some, which raises FD, so
    the percentile bracket of two samples of one distribution lies above their FD."""
    rng = np.random.default_rng(0)
    gen, real = rng.normal(size=(200, 16)), rng.normal(size=(200, 16))
    fd, (lo, hi) = Q.fd_with_ci(gen, real, n_boot=50)
    assert fd < lo < hi
    assert "above the point estimate" in Q.FD_INTERVAL_NOTE
