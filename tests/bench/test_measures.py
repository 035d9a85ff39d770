"""bench.measures on synthetic sets whose answer is known: a set against a fresh draw of itself sits at
chance, a blurred copy (a draft without fine texture) is told apart and loses high-frequency energy,
shuffled tokens fail the token detector, and the tier rule passes, fails and withholds as documented."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench import measures as Q
from bench import summary as SU

VOCAB, GRID = 16, 8


def textures(n: int, seed: int, size: int = 32) -> torch.Tensor:
    """[n, 3, size, size] images in [0, 1]: a smooth colour field plus per-pixel grain."""
    g = torch.Generator().manual_seed(seed)
    base = F.interpolate(torch.rand(n, 3, 4, 4, generator=g), size=(size, size), mode="bilinear", align_corners=False)
    return (0.7 * base + 0.3 * torch.rand(n, 3, size, size, generator=g)).clamp(0, 1)


def blur(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(F.avg_pool2d(x, 4), size=x.shape[-2:], mode="nearest")


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, GRID * GRID), generator=torch.Generator().manual_seed(seed))


def sset(images: torch.Tensor, toks: torch.Tensor | None = None) -> Q.SampleSet:
    n = len(images)
    return Q.SampleSet(Q.to_uint8(images), toks, np.random.default_rng(0).normal(size=(n, 4)), np.arange(n) % 3)


def test_sample_set_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"\[N, 3, H, W\]"):
        Q.SampleSet(torch.zeros(2, 1, 8, 8), None)
    with pytest.raises(ValueError, match="3 token rows for 2 images"):
        Q.SampleSet(torch.zeros(2, 3, 8, 8), torch.zeros(3, 4))


def test_folds_keep_each_pair_in_one_fold_and_balance_them():
    f = Q._folds(10, 4, seed=3)
    assert f.shape == (10,) and sorted(np.bincount(f)) == [2, 2, 3, 3]
    with pytest.raises(ValueError, match="at least 4 pairs"):
        Q.c2st(np.zeros((3, 2)), np.zeros((3, 2)), "spectral")


def test_c2st_sits_at_chance_on_the_same_distribution_and_sees_a_blur():
    a, b = textures(300, 1), textures(300, 2)
    fa, fb = Q.spectral_features(a), Q.spectral_features(b)
    same = Q.c2st(fa, fb, "spectral")      # one standard error at 300 pairs: about 0.03
    assert abs(same.accuracy - 0.5) < 0.08 and same.ci[0] < same.accuracy < same.ci[1]
    smooth = Q.c2st(fa, Q.spectral_features(blur(b)), "spectral")
    assert smooth.accuracy > 0.95 and smooth.ci[0] > 0.9
    cnn = Q.c2st(a[:120], blur(b[:120]), "cnn")
    assert cnn.accuracy > 0.9, cnn


def test_token_detector_sees_repeated_blocks():
    """A lifted low-res draft repeats each code over a 2 x 2 block: the token statistics show it."""
    a = tokens(120, 1)
    low = tokens(120, 2)[:, :(GRID // 2) ** 2].reshape(120, GRID // 2, GRID // 2)
    lifted = low.repeat_interleave(2, 1).repeat_interleave(2, 2).reshape(120, -1)
    assert Q.c2st(Q.token_features(a, VOCAB, GRID), Q.token_features(lifted, VOCAB, GRID), "tokens").accuracy > 0.95
    assert Q.c2st(Q.token_features(a, VOCAB, GRID), Q.token_features(tokens(120, 3), VOCAB, GRID),
                  "tokens").accuracy < 0.62


def test_hf_energy_unique_codes_and_pairwise():
    x = textures(8, 4)
    assert (Q.hf_energy(blur(x)) < 0.5 * Q.hf_energy(x)).all()
    t = torch.tensor([[1, 1, 2, 3], [0, 0, 0, 0]])
    assert Q.unique_codes(t).tolist() == [3.0, 1.0]
    same = torch.ones(4, 3, 4, 4) * 0.5
    assert Q.pairwise_within_class(same, np.array([0, 0, 1, 1])) == 0.0
    assert np.isnan(Q.pairwise_within_class(same, np.array([0, 1, 2, 3])))      # no class has a pair


def test_patch_swd_sees_missing_texture_at_the_full_level():
    a = textures(24, 5)
    near, far = Q.patch_swd(textures(24, 6), a), Q.patch_swd(blur(textures(24, 6)), a)
    assert set(far) == set(Q.SWD_LEVELS)
    assert far["full"] > 2 * near["full"]
    tiny = Q.patch_swd(textures(6, 7, size=8), textures(6, 8, size=8))          # levels smaller than a patch
    assert all(np.isfinite(v) for v in tiny.values())


def test_precision_recall_identical_and_disjoint():
    r = np.random.default_rng(0).normal(size=(50, 3))
    assert Q.precision_recall(r, r) == (1.0, 1.0)
    p, rec = Q.precision_recall(r + 100.0, r)
    assert p == 0.0 and rec == 0.0
    with pytest.raises(ValueError, match="more than 3 samples"):
        Q.precision_recall(r[:3], r[:3])


def _row(c2st_ar=0.5, c2st_real=0.6, swd=100.0, pr=0.8, samples=400):
    det = None if c2st_ar is None else {d: {"accuracy": c2st_ar, "ci": [c2st_ar - 0.03, c2st_ar + 0.03],
                                            "pairs": samples} for d in Q.DETECTORS}
    real = {d: {"accuracy": c2st_real, "ci": [0, 1], "pairs": samples} for d in Q.DETECTORS}
    real.update(max=c2st_real, max_detector="cnn")
    return {"samples": samples, "c2st_ar": det, "c2st_real": real, "swd": {lvl: swd for lvl in Q.SWD_LEVELS},
            "precision": {sp: pr for sp in Q.PR_SPACES}, "recall": {sp: pr for sp in Q.PR_SPACES},
            "diversity_ratio": {d: 1.0 for d in Q.DIVERSITY}, "nll_gap": 0.0, "accuracy": 0.95, "fd": 4.0}


def test_tier_rule():
    ar = _row(c2st_ar=None)
    assert Q.tier(_row(), ar)["tier"] == Q.INDISTINGUISHABLE
    good = Q.tier(_row(c2st_ar=0.7, c2st_real=0.62, swd=109.0, pr=0.78), ar)
    assert good["tier"] == Q.AS_GOOD and not good["indistinguishable"] and good["as_good"]
    worse = Q.tier(_row(c2st_ar=0.7, swd=111.0), ar)
    assert worse["tier"] == Q.OUTSIDE and any("SWD full" in w for w in worse["why"])
    assert Q.tier(_row(c2st_ar=0.7, c2st_real=0.64), ar)["tier"] == Q.OUTSIDE
    assert Q.tier(_row(c2st_ar=0.7, pr=0.76), ar)["tier"] == Q.OUTSIDE
    # a pass needs 400 images per side; a failure fails at any count
    few = Q.tier(_row(samples=100), ar)
    assert few["tier"] == Q.OUTSIDE and not few["powered"] and any("only 100" in w for w in few["why"])
    assert not Q.in_tier(few, Q.AS_GOOD) and Q.in_tier(Q.tier(_row(), ar), Q.AS_GOOD)
    assert not Q.in_tier(None, Q.INDISTINGUISHABLE)


def test_blind_measures_and_null_check():
    ar = _row(c2st_ar=None)
    drafter = _row(c2st_ar=0.99, swd=300.0)
    drafter["c2st_ar"]["cnn"]["accuracy"] = 0.52                     # this detector cannot see it
    blind = Q.blind_measures(drafter, ar)
    assert "C2ST vs AR (cnn)" in blind and "C2ST vs AR (spectral)" not in blind and "SWD full" not in blind
    assert "classifier accuracy" in blind and "FD" in blind          # the old columns are blind here
    assert Q.null_check(_row(c2st_ar=0.51)) == []
    off = Q.null_check(_row(c2st_ar=0.56, samples=100))
    assert len(off) == len(Q.DETECTORS) and "one standard error" in off[0]


def _result(drafter_row: dict) -> dict:
    methods = {"ar": {"measures": _row(c2st_ar=None), "accuracy": 0.95, "fd": 4.0},
               SU.BLINDNESS_ROW: {"measures": drafter_row, "accuracy": 0.97, "fd": 3.9}}
    res = {"settings": {"quality_meaningful": True}, "methods": methods}
    res["quality"] = SU.tier_summary(methods)
    return res


def test_check_quality_fails_when_the_drafter_alone_passes_or_a_detector_is_blind():
    assert SU.check_quality(_result(_row(c2st_ar=0.99, swd=300.0))) == []
    fails = SU.check_quality(_result(_row(c2st_ar=0.5)))
    assert any("not outside the tiers" in f for f in fails) and any("blind" in f for f in fails)
    one_blind = _row(c2st_ar=0.99, swd=300.0)
    one_blind["c2st_ar"]["tokens"]["accuracy"] = 0.5
    assert SU.check_quality(_result(one_blind)) == [
        f"C2ST detectors blind to the unverified drafter ({SU.BLINDNESS_ROW}): ['tokens']"]
    missing = _result(_row(c2st_ar=0.99, swd=300.0))
    del missing["methods"]["ar"]["measures"]
    assert SU.check_quality(missing) == ["ar: no quality measures"]


def test_screen_fails_only_what_is_clearly_outside():
    """At a few samples a C2ST fails the screen only when its whole interval is above the bound."""
    ar = _row(c2st_ar=None)
    noisy = _row(c2st_ar=0.58, samples=64)                           # interval [0.55, 0.61]: not clearly above
    assert Q.screen(noisy, ar) == {Q.INDISTINGUISHABLE: True, Q.AS_GOOD: True}
    clear = _row(c2st_ar=0.70, samples=64)
    assert Q.screen(clear, ar) == {Q.INDISTINGUISHABLE: False, Q.AS_GOOD: True}     # as good against real data
    smooth = _row(c2st_ar=0.70, swd=125.0, samples=64)               # beyond 1.10 x 1.10 of AR's SWD
    assert Q.screen(smooth, ar) == {Q.INDISTINGUISHABLE: False, Q.AS_GOOD: False}
    assert Q.screen(_row(c2st_ar=0.70, swd=118.0, samples=64), ar)[Q.AS_GOOD]       # within the screening margin


def test_shuffled_tokens_fail_the_indistinguishable_tier():
    """Each image's own codes in a random order: the same histogram, none of the spatial structure. The token
    detector sees it, and that one detector is enough to put the set outside "indistinguishable"."""
    n = Q.TIER_MIN_SAMPLES

    def lifted(seed: int) -> torch.Tensor:         # images whose neighbouring codes repeat, as real ones do
        low = tokens(n, seed)[:, :(GRID // 2) ** 2].reshape(n, GRID // 2, GRID // 2)
        return low.repeat_interleave(2, 1).repeat_interleave(2, 2).reshape(n, -1)
    ar, fresh = lifted(9), lifted(10)
    g = torch.Generator().manual_seed(11)
    shuffled = torch.stack([row[torch.randperm(row.numel(), generator=g)] for row in ar])
    feats = lambda t: Q.token_features(t, VOCAB, GRID)
    seen, null = Q.c2st(feats(ar), feats(shuffled), "tokens"), Q.c2st(feats(ar), feats(fresh), "tokens")
    assert seen.accuracy > 0.9 and null.accuracy < 0.56
    row = _row()
    row["c2st_ar"]["tokens"] = {"accuracy": seen.accuracy, "ci": list(seen.ci), "pairs": n}
    v = Q.tier(row, _row(c2st_ar=None))
    assert not v["indistinguishable"] and not Q.in_tier(v, Q.INDISTINGUISHABLE)
    assert any("tokens" in w for w in v["why"])
