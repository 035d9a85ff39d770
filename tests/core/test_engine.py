"""The decoding engine (decode.generate) on tiny random LlamaGen models, CPU.

Exactness anchors (docs/DESIGN.md section 6): greedy + raster rejection == greedy AR; exact acceptance +
raster rejection with a same-resolution drafter samples AR's distribution (chi-square, with the
same test failing on two deliberately wrong samplers); tau > 1 + serial resampling == AR for the
same seed. Then call counts of the target-only baselines (ZipAR, SJD, GSD), statistics and acceptance
maps, parameter errors, committed positions never rewritten, and the target distributions the
verifier and resampler use always being the target's given the current tokens.
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch

from mulosd_core import decode, verify
from mulosd_core.decode import speculative
from mulosd_core.decode import generate_ar
from mulosd_core.decode import (
    ACCEPTED,
    NEIGHBOUR,
    REJECTED,
    TARGET,
    MethodConfig,
    VerifierConfig,
    generate,
    map_codes,
)
from mulosd_core.models.llamagen import LlamaGenModel
from mulosd_core.sampling import SamplingConfig, cfg_combine, process_logits
from mulosd_core.schedules import parallel_draft_nfe, zipar_nfe
from mulosd_core.testing import CountingModel, randomize_, tiny_model, tiny_vq
from mulosd_core.upsample import UpsamplerConfig

V = 16
GREEDY = SamplingConfig(cfg_scale=1.0, temperature=0.0)



# ----------------------------------------------------------------------------- helpers
def noisy_copy(model: LlamaGenModel, noise: float, seed: int) -> LlamaGenModel:
    """Same architecture, grid and VQ, GPT weights perturbed: a same-resolution drafter that agrees
    with the target often but not always."""
    gpt = copy.deepcopy(model.gpt)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gpt.parameters():
            p.add_(noise * torch.randn(p.shape, generator=g))
    return LlamaGenModel(gpt, model.vq, model.image_size, name=f"{model.name}-noisy")



class Spliced:
    """A drafter equal to model `a` for image positions < split and to model `b` from there on.

    With a = the target and split = 1, every sample accepts its position-0 draft (p == q), so the
    raster cut of a big batch reaches index 1 and the exact rule is exercised inside a draft chain,
    not only at the chunk's first position."""

    def __init__(self, a, b, split: int) -> None:
        self.a, self.b, self.split = a, b, split

    def __getattr__(self, name):
        return getattr(self.a, name)

    def new_cache(self, rows):
        return self.a.new_cache(rows), self.b.new_cache(rows)

    def truncate(self, cache, length):
        self.a.truncate(cache[0], length)
        self.b.truncate(cache[1], length)

    def prefill(self, rows, cache):
        la, lb = self.a.prefill(rows, cache[0]), self.b.prefill(rows, cache[1])
        return la if self.split > 0 else lb

    def forward_tokens(self, tokens, positions, cache, fed_at=None):
        la = self.a.forward_tokens(tokens, positions, cache[0], fed_at)
        lb = self.b.forward_tokens(tokens, positions, cache[1], fed_at)
        predicted = (positions if fed_at is None else fed_at) + 1
        return torch.where((predicted < self.split)[None, :, None], la, lb)


def teacher_forced_probs(model: LlamaGenModel, cond, tokens: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Processed target probabilities [B, N, V] of every position given `tokens` (one uncached forward)."""
    with torch.no_grad():
        logits = model.gpt(tokens, cond, model.grid)
        if sampling.uses_cfg:
            uncond = model.gpt(tokens, model.gpt.null_condition(tokens.shape[0]), model.grid)
            logits = cfg_combine(torch.cat([logits, uncond]), sampling.cfg_scale)
    return process_logits(logits, sampling)


def spec(rule="mulo", rejection="local", resampling="islands", tau=0.3, k=4, radius=1, recheck=0, scope="drafts",
         feed="local", **kw) -> MethodConfig:
    verifier = VerifierConfig(rule=rule, tau=tau, k_neighbours=k, expansion_radius=radius, rejection=rejection,
                              resampling=resampling, recheck=recheck, recheck_scope=scope, wave_feed=feed)
    kind = kw.pop("kind", "nearest")
    return MethodConfig(method="speculative", verifier=verifier, upsampler=UpsamplerConfig(kind=kind), **kw)


# ----------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def vq():
    return tiny_vq(0, V)


@pytest.fixture(scope="module")
def target4(vq):
    return tiny_model(4, 1, vq=vq, dim=16)


@pytest.fixture(scope="module")
def target8(vq):
    return tiny_model(8, 4, vq=vq, dim=16)


@pytest.fixture(scope="module")
def same_res(target4):
    return noisy_copy(target4, 0.08, seed=5)


@pytest.fixture(scope="module")
def low2(vq):
    return tiny_model(2, 3, vq=vq, dim=16)


@pytest.fixture(scope="module")
def models(target4, target8, same_res, low2):
    return {4: target4, 8: target8, "same": same_res, 2: low2}


# ----------------------------------------------------------------------------- anchor 1: greedy
GREEDY_CASES = [
    # target grid, drafter, parallel_window, rows_per_step, draft_len, upsampler, batch, cfg scale
    pytest.param(4, "same", 0, 1, 0, "nearest", 1, 1.0, id="r1-row-b1"),
    pytest.param(4, "same", 0, 2, 0, "nearest", 2, 3.0, id="r1-2rows-b2-cfg"),
    pytest.param(4, "same", 0, 1, 3, "nearest", 2, 1.0, id="r1-draftlen3-b2"),
    pytest.param(4, 2, 0, 1, 0, "pixel", 1, 1.0, id="r2-seq-pixel-b1"),
    pytest.param(4, 2, 0, 2, 0, "embedding", 2, 3.0, id="r2-seq-embedding-b2-cfg"),
    pytest.param(4, 2, 1, 2, 0, "nearest", 2, 1.0, id="r2-parallel-b2"),
    pytest.param(4, 2, 1, 2, 0, "pixel", 1, 3.0, id="r2-parallel-pixel-b1-cfg"),
    pytest.param(8, 2, 0, 1, 0, "nearest", 1, 1.0, id="r4-seq-b1"),
    pytest.param(8, 2, 1, 2, 0, "nearest", 2, 1.0, id="r4-parallel-b2"),
]


@pytest.mark.parametrize("grid,drafter,window,rows,draft_len,kind,batch,cfg", GREEDY_CASES)
def test_greedy_raster_reproduces_greedy_ar(models, grid, drafter, window, rows, draft_len, kind, batch, cfg):
    target, draft_model = models[grid], models[drafter]
    sampling = SamplingConfig(cfg_scale=cfg, temperature=0.0)
    labels = torch.tensor([3, 7][:batch])
    method = spec(rule="greedy", rejection="raster", kind=kind, parallel_window=window, rows_per_step=rows,
                  draft_len=draft_len)
    res = generate(target, labels, sampling, method, drafter=draft_model, seed=11, decode=False)
    ar = generate_ar(target, labels, sampling, seed=0, decode=False)
    assert torch.equal(res.tokens, ar.tokens)
    # the case exercises both paths: some drafts accepted, some corrected
    assert res.stats.accepted > 0 and res.stats.resampled > 0, res.stats


# ----------------------------------------------------------------------------- anchor 2: exact SD
CHI_VOCAB, CHI_LABEL, CHI_SAMPLES = 4, 3, 1000
CHI_SAMPLING = SamplingConfig(cfg_scale=2.0, temperature=0.9, top_k=3)


@pytest.fixture(scope="module")
def chi_setup():
    """2x2 grid, 4 codes: target, a drafter far from it (equal to it at position 0 only), and the
    exact AR joint distribution of all 4^4 token grids."""
    vq4 = tiny_vq(0, CHI_VOCAB)
    target = tiny_model(2, 11, vq=vq4, dim=16)
    other = tiny_model(2, 12, vq=vq4, dim=16)
    randomize_(target.gpt, 11, std=0.5)   # peakier distributions than the default: a drafter far from p
    randomize_(other.gpt, 12, std=0.5)
    grids = torch.tensor(list(itertools.product(range(CHI_VOCAB), repeat=target.num_tokens)))
    p = teacher_forced_probs(target, torch.full((len(grids),), CHI_LABEL), grids, CHI_SAMPLING)
    joint = p.gather(-1, grids[..., None])[..., 0].double().prod(-1)   # grids enumerate in index order
    assert abs(float(joint.sum()) - 1) < 1e-5
    return target, Spliced(target, other, split=1), joint


def chi_square(tokens: torch.Tensor, joint: torch.Tensor) -> tuple[float, int, float]:
    """Pearson chi-square of the observed token grids against the exact joint: cells expected below 5
    are pooled into one; returns (statistic, degrees of freedom, p-value). A grid the target gives
    probability 0 (top-k) fails outright."""
    n, N = tokens.shape
    index = (tokens * CHI_VOCAB ** torch.arange(N - 1, -1, -1)).sum(1)
    observed = torch.bincount(index, minlength=len(joint)).double()
    expected = joint * n
    impossible = joint == 0
    big = expected >= 5
    if float(observed[impossible].sum()) > 0:
        return float("inf"), int(big.sum()), 0.0
    observed, expected, big = observed[~impossible], expected[~impossible], big[~impossible]
    o, e = observed[big], expected[big]
    if bool((~big).any()):
        o, e = torch.cat([o, observed[~big].sum()[None]]), torch.cat([e, expected[~big].sum()[None]])
    stat = float(((o - e) ** 2 / e).sum())
    df = len(o) - 1
    half = lambda x: torch.tensor(x / 2, dtype=torch.float64)  # noqa: E731
    p_value = float(torch.special.gammaincc(half(df), half(stat)))   # chi-square survival function
    return stat, df, p_value


def _exact_sd(chi_setup, oracle=False):
    target, drafter, joint = chi_setup
    method = spec(rule="exact", rejection="raster", rows_per_step=2, oracle=oracle)   # draft the whole 2x2 grid
    res = generate(target, torch.full((CHI_SAMPLES,), CHI_LABEL), CHI_SAMPLING, method, drafter=drafter, seed=2024,
                   decode=False)
    return res, chi_square(res.tokens, joint)


def test_exact_acceptance_samples_the_ar_distribution(chi_setup):
    res, (stat, df, p_value) = _exact_sd(chi_setup)
    print(f"exact SD: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}")
    assert df >= 5
    assert p_value > 1e-3, (stat, df)
    # the chain did reach index 1: every sample accepted position 0 in the first step
    assert res.stats.accepted >= CHI_SAMPLES and 0 < res.stats.resampled


def test_chi_square_has_power_accept_everything(chi_setup):
    _, (stat, df, p_value) = _exact_sd(chi_setup, oracle=True)
    print(f"accept everything: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}")
    assert p_value < 1e-6


def test_chi_square_has_power_resampling_without_residual(chi_setup, monkeypatch):
    """A classic SD bug: after a rejection, resample from p instead of norm(max(p - q, 0))."""
    monkeypatch.setattr(verify, "residual", lambda p, q: p)
    _, (stat, df, p_value) = _exact_sd(chi_setup)
    print(f"no residual: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}")
    assert p_value < 1e-6


# ----------------------------------------------------------------------------- anchor 3: tau > 1
TAU_CASES = [
    # seed, batch, cfg, drafter, resampling, rows_per_step
    pytest.param(0, 1, 1.0, "same", "serial", 1, id="s0-b1-r1"),
    pytest.param(1, 2, 3.0, "same", "serial", 1, id="s1-b2-r1-cfg"),
    pytest.param(2, 2, 1.0, "same", "serial", 2, id="s2-b2-r1-2rows"),
    pytest.param(3, 1, 3.0, 2, "serial", 1, id="s3-b1-r2-cfg"),
    pytest.param(4, 2, 3.0, 2, "serial", 2, id="s4-b2-r2-cfg-2rows"),
    pytest.param(5, 2, 1.0, 2, "islands", 1, id="s5-b2-r2-islands"),   # whole-row chunks: one island
]


@pytest.mark.parametrize("seed,batch,cfg,drafter,resampling,rows", TAU_CASES)
def test_tau_above_one_is_ar_sampling(models, seed, batch, cfg, drafter, resampling, rows):
    target = models[4]
    sampling = SamplingConfig(cfg_scale=cfg, temperature=0.9, top_k=6, top_p=0.9)
    labels = torch.tensor([5, 2][:batch])
    method = spec(rule="mulo", tau=1.05, k=V, rejection="local", resampling=resampling, rows_per_step=rows)
    res = generate(target, labels, sampling, method, drafter=models[drafter], seed=seed, decode=False)
    ar = generate_ar(target, labels, sampling, seed=seed, decode=False)
    assert torch.equal(res.tokens, ar.tokens)
    assert res.stats.accepted == 0 and res.stats.resampled == 16 * batch
    assert bool((map_codes(res.maps) == REJECTED).all())


# ----------------------------------------------------------------------------- ZipAR and SJD
@pytest.mark.parametrize("window,cfg", [(1, 1.0), (2, 3.0), (3, 1.0), (4, 1.0), (8, 3.0)])
def test_zipar_calls_match_formula(target4, window, cfg):
    target = CountingModel(target4)
    sampling = SamplingConfig(cfg_scale=cfg, temperature=1.0)
    method = MethodConfig(method="zipar", zipar_window=window)
    res = generate(target, torch.tensor([1, 8]), sampling, method, seed=3, decode=False)
    assert res.stats.target_calls == zipar_nfe(4, window) == target.calls
    assert res.tokens.shape == (2, 16) and 0 <= int(res.tokens.min()) and int(res.tokens.max()) < V
    assert res.stats.resampled == 32
    if window >= 4:  # the schedule is plain raster AR: same tokens as AR for the same seed
        ar = generate_ar(target4, torch.tensor([1, 8]), sampling, seed=3, decode=False)
        assert torch.equal(res.tokens, ar.tokens)


@pytest.mark.parametrize("window,batch,cfg", [(1, 1, 1.0), (3, 2, 3.0), (16, 2, 1.0)])
def test_sjd_iterations_and_calls(target4, window, batch, cfg):
    target = CountingModel(target4)
    sampling = SamplingConfig(cfg_scale=cfg, temperature=1.0)
    iterations: list[int] = []
    res = generate(target, torch.tensor([4, 6][:batch]), sampling, MethodConfig(method="sjd", sjd_window=window),
                   seed=9, decode=False, progress=lambda done, total, toks: iterations.append(done))
    s = res.stats
    assert len(iterations) == s.steps and iterations[-1] == 16 and iterations == sorted(iterations)
    # one call per iteration plus the prefill; a window of 1 verifies its first position with the
    # prefill's own logits, so that iteration needs no call
    assert s.target_calls == s.steps + 1 - int(window == 1) == target.calls
    assert s.accepted + s.resampled == 16 * batch
    assert s.drafted >= 16 * batch and s.accepted <= s.drafted
    if window == 1:
        assert s.steps == 16


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_sjd_greedy_is_greedy_ar(target4, cfg):
    sampling = SamplingConfig(cfg_scale=cfg, temperature=0.0)
    labels = torch.tensor([0, 9])
    res = generate(target4, labels, sampling, MethodConfig(method="sjd", sjd_window=5), seed=1, decode=False)
    assert torch.equal(res.tokens, generate_ar(target4, labels, sampling, decode=False).tokens)


def gsd(window: int = 16, **group) -> MethodConfig:
    return MethodConfig(method="sjd", sjd_window=window, verifier=VerifierConfig(rule="gsd", **group))


@pytest.mark.parametrize("group", [dict(gsd_rank_window=0), dict(gsd_p_thr=0.0), dict(gsd_d_thr=0.0)])
@pytest.mark.parametrize("window,batch,cfg", [(3, 2, 3.0), (8, 1, 1.0)])
def test_gsd_group_of_one_is_sjd(target4, group, window, batch, cfg):
    """GSD whose groups hold the draft alone is SJD: same drafts, uniforms and residuals, so the same
    tokens and counters for the same seed."""
    sampling = SamplingConfig(cfg_scale=cfg, temperature=1.0, top_k=6)
    labels = torch.tensor([3, 7][:batch])
    for seed in range(3):
        a = generate(target4, labels, sampling, MethodConfig(method="sjd", sjd_window=window), seed=seed, decode=False)
        b = generate(target4, labels, sampling, gsd(window, **group), seed=seed, decode=False)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.maps, b.maps)
        sa, sb = a.stats.to_dict(), b.stats.to_dict()
        for key in ("target_calls", "steps", "drafted", "accepted", "resampled"):
            assert sa[key] == sb[key], key
        assert sb["method"] == "gsd" and sa["method"] == "sjd"


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_gsd_greedy_is_greedy_ar(target4, cfg):
    """Under greedy sampling p is one-hot: a draft other than the argmax has p = 0, so the argmax (p = 1)
    never joins its group while p_thr <= 1 and it is rejected; the residual is the argmax."""
    sampling = SamplingConfig(cfg_scale=cfg, temperature=0.0)
    labels = torch.tensor([0, 9])
    for group in (dict(), dict(gsd_rank_window=4, gsd_p_thr=1.0, gsd_d_thr=4.0)):
        res = generate(target4, labels, sampling, gsd(5, **group), seed=1, decode=False)
        assert torch.equal(res.tokens, generate_ar(target4, labels, sampling, decode=False).tokens)


@pytest.mark.parametrize("window,batch", [(1, 1), (4, 2), (16, 2)])
def test_gsd_calls_and_statistics(target4, window, batch):
    """SJD's bookkeeping holds: one call per iteration plus the prefill, every token accepted or resampled;
    a wide group (no distance gate, every probability close) accepts at least as often as SJD on average."""
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0)
    labels = torch.tensor([4, 6][:batch])
    acc = {"sjd": 0, "gsd": 0}
    for seed in range(4):
        target = CountingModel(target4)
        res = generate(target, labels, sampling, gsd(window, gsd_rank_window=4, gsd_p_thr=1.0, gsd_d_thr=4.0),
                       seed=seed, decode=False)
        s = res.stats
        assert s.target_calls == s.steps + 1 - int(window == 1) == target.calls
        assert s.accepted + s.resampled == 16 * batch and s.accepted <= s.drafted
        assert bool(((map_codes(res.maps) == ACCEPTED) | (map_codes(res.maps) == REJECTED)).all())
        acc["gsd"] += s.accepted
        acc["sjd"] += generate(target4, labels, sampling, MethodConfig(method="sjd", sjd_window=window),
                               seed=seed, decode=False).stats.accepted
    assert acc["gsd"] >= acc["sjd"]


def test_gsd_rule_with_a_same_resolution_drafter(models):
    """The gsd rule also verifies an SD drafter's chain (it has q); with groups of one it is SD's exact rule."""
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=8)
    labels = torch.tensor([1, 5])
    runs = [generate(models[4], labels, sampling,
                     MethodConfig(verifier=VerifierConfig(rule=rule, rejection="raster", **kw), draft_len=4),
                     drafter=models["same"], seed=2, decode=False)
            for rule, kw in (("exact", {}), ("gsd", dict(gsd_rank_window=0)))]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].stats.accepted == runs[1].stats.accepted
    grouped = generate(models[4], labels, sampling, MethodConfig(verifier=VerifierConfig(rule="gsd", rejection="raster"),
                                                                 draft_len=4), drafter=models["same"], seed=2, decode=False)
    assert grouped.stats.accepted + grouped.stats.resampled == 32


# ----------------------------------------------------------------------------- drafting
@pytest.fixture(scope="module")
def low4(vq):
    return tiny_model(4, 6, vq=vq, dim=16)


def _drafter_calls_expected(low_rows: int, width: int, rows_per_step: int, window: int) -> int:
    """Prefill + per step: one context-sync call (after the first step) and the drafting schedule's
    calls, less its first, which reads the sync call's logits (schedules.parallel_draft_nfe)."""
    calls, row = 1, 0
    while row < low_rows:
        n = min(rows_per_step, low_rows - row)
        calls += int(row > 0) + parallel_draft_nfe(n, width, window if window and n > 1 else width) - 1
        row += n
    return calls


@pytest.mark.parametrize("rows,window", [(2, 1), (2, 3), (4, 1), (4, 2), (3, 0)])
def test_parallel_drafting_calls_match_formula(target8, low4, rows, window):
    drafter = CountingModel(low4)
    method = spec(rule="mulo", tau=0.5, k=8, rejection="local", rows_per_step=rows, parallel_window=window)
    res = generate(target8, torch.tensor([3, 5]), SamplingConfig(), method, drafter=drafter, seed=10, decode=False)
    assert res.stats.drafter_calls == drafter.calls == _drafter_calls_expected(4, 4, rows, window)


@pytest.mark.parametrize("rejection,cfg", [("local", 3.0), ("raster", 1.0)])
def test_parallel_window_of_a_whole_row_is_sequential_drafting(target4, low2, rejection, cfg):
    """Window >= the drafter's row width: row i+1 starts after row i ends, the same draws in the
    same order as sequential drafting."""
    sampling = SamplingConfig(cfg_scale=cfg)
    runs = [generate(target4, torch.tensor([3, 5]), sampling,
                     spec(rule="mulo", tau=0.5, k=8, rejection=rejection, rows_per_step=2, parallel_window=w),
                     drafter=low2, seed=10, decode=False) for w in (0, 2)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].stats.drafter_calls == runs[1].stats.drafter_calls


@pytest.mark.parametrize("drafter,resampling,radius,window,kind", [
    ("same", "islands", 1, 0, "nearest"), (2, "serial", 0, 1, "pixel"), (2, "islands", 1, 0, "embedding")])
def test_local_rejection_is_batch_invariant(models, drafter, resampling, radius, window, kind):
    """Sample i of a batch equals a batch-1 run seeded with seed + i (own random streams per sample;
    local rejection couples no samples; raster rejection does, by cutting all at the first rejection).
    Only with wave_feed "span": a "local" wave feeds the union of the slots the batch's samples need, so
    one sample's islands refresh K/V that another sample's resampled tokens then read."""
    method = spec(rule="mulo", tau=0.5, k=8, radius=radius, resampling=resampling, rows_per_step=2,
                  parallel_window=window, kind=kind, feed="span")
    sampling = SamplingConfig(cfg_scale=3.0)
    both = generate(models[4], torch.tensor([3, 5]), sampling, method, drafter=models[drafter], seed=10, decode=False)
    for i, label in enumerate((3, 5)):
        one = generate(models[4], torch.tensor([label]), sampling, method, drafter=models[drafter], seed=10 + i,
                       decode=False)
        assert torch.equal(both.tokens[i:i + 1], one.tokens)


# ----------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("rejection,resampling,drafter", [("local", "islands", 2), ("local", "serial", 2),
                                                         ("raster", "islands", 2), ("local", "islands", "same"),
                                                         ("raster", "serial", "same")])
def test_statistics_add_up(models, rejection, resampling, drafter):
    target, draft_model = CountingModel(models[4]), CountingModel(models[drafter])
    B, N = 2, 16
    method = spec(rule="mulo", tau=0.5, k=8, radius=1, rejection=rejection, resampling=resampling)
    res = generate(target, torch.tensor([1, 2]), SamplingConfig(cfg_scale=2.0), method, drafter=draft_model, seed=4,
                   decode=False)
    s = res.stats
    assert s.batch == B and s.tokens == N and s.method == "speculative"
    assert s.accepted + s.resampled == N * B
    assert s.accepted > 0 and s.resampled > 0
    assert s.accepted <= s.drafted
    assert s.target_calls == target.calls and s.drafter_calls == draft_model.calls
    assert res.maps.shape == (B, 3, 4, 4) and res.maps.dtype == torch.float32
    codes = map_codes(res.maps)
    assert int((codes == ACCEPTED).sum()) == s.accepted
    if rejection == "raster":
        assert s.target_calls == 1 + s.steps
        assert int(((codes == REJECTED) | (codes == TARGET)).sum()) == s.resampled
    else:
        rows = 1 if drafter == "same" else 2   # one drafted row = 1 target row (r = 1) or 2 (r = 2)
        assert s.steps == 4 // rows and len(s.waves) == s.steps
        assert 1 + s.steps <= s.target_calls <= 1 + s.steps + sum(s.waves)
        assert int(((codes == REJECTED) | (codes == NEIGHBOUR)).sum()) == s.resampled
        assert int((codes == REJECTED).sum()) > 0
    d = s.to_dict()
    assert d["acceptance_rate"] == pytest.approx(s.accepted / s.drafted)
    assert d["resampled_fraction"] == pytest.approx(s.resampled / (N * B))


@pytest.mark.parametrize("rejection", ["local", "raster"])
@pytest.mark.parametrize("drafter,rows,chunks,bonuses", [
    # 4x4 target; a step drafts `rows` drafter rows = rows * r target rows. Raster rejection with
    # every draft accepted also samples the position after the chunk from the verify call's logits
    # (a "bonus" target token) and starts the next chunk after it.
    ("same", 1, 4, 3),   # r = 1: chunks [0,4) +4, [5,8) +8, [9,12) +12, [13,16)
    (2, 1, 2, 1),        # r = 2: chunks [0,8) +8, [9,16)
    (2, 2, 1, 0),        # r = 2, two drafter rows: the whole grid in one step
])
def test_oracle_accepts_everything(models, rejection, drafter, rows, chunks, bonuses):
    target, B = CountingModel(models[4]), 2
    method = spec(rule="mulo", tau=1.05, rejection=rejection, rows_per_step=rows, oracle=True)
    res = generate(target, torch.tensor([1, 2]), SamplingConfig(), method, drafter=models[drafter], seed=0,
                   decode=False)
    s, codes = res.stats, map_codes(res.maps)
    assert s.steps == chunks and s.target_calls == 1 + s.steps == target.calls
    assert s.accepted == s.drafted
    if rejection == "local":
        assert s.accepted == 16 * B and s.resampled == 0
        assert bool((codes == ACCEPTED).all())
    else:
        assert s.resampled == bonuses * B and s.accepted == (16 - bonuses) * B
        assert int((codes == TARGET).sum()) == s.resampled
        assert bool(((codes == ACCEPTED) | (codes == TARGET)).all())


def test_ar_method_map_is_all_target(target4):
    res = generate(target4, torch.tensor([1]), SamplingConfig(), MethodConfig(method="ar"), decode=False)
    assert res.maps.shape == (1, 3, 4, 4)
    assert bool((map_codes(res.maps) == TARGET).all())


def test_map_codes_refuses_what_is_not_an_acceptance_map(target4):
    maps = generate(target4, torch.tensor([1]), SamplingConfig(), MethodConfig(method="ar"), decode=False).maps
    maps[0, :, 2, 3] = 0.5
    with pytest.raises(ValueError, match="not an acceptance map"):
        map_codes(maps)


# ----------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("drafter,rejection,resampling,radius,draft_len", [
    ("same", "local", "serial", 2, 3),     # chunks start mid-row: expansion must not reach back
    ("same", "local", "islands", 1, 0),
    (2, "local", "islands", 2, 0),
    (2, "raster", "islands", 1, 0),
])
def test_committed_positions_are_never_rewritten(models, drafter, rejection, resampling, radius, draft_len):
    snapshots: list[tuple[int, torch.Tensor]] = []
    method = spec(rule="mulo", tau=0.4, k=3, radius=radius, rejection=rejection, resampling=resampling,
                  draft_len=draft_len)
    res = generate(models[4], torch.tensor([3, 4]), SamplingConfig(), method, drafter=models[drafter], seed=8,
                   decode=False, progress=lambda done, total, toks: snapshots.append((done, toks.clone())))
    assert res.stats.resampled > 0
    assert [d for d, _ in snapshots] == sorted(d for d, _ in snapshots) and snapshots[-1][0] == 16
    for i, (done, toks) in enumerate(snapshots):
        for _, later in snapshots[i + 1:]:
            assert torch.equal(later[:, :done], toks[:, :done])
        assert torch.equal(res.tokens[:, :done], toks[:, :done])


@pytest.mark.parametrize("resampling,radius,cfg,seed,recheck", [("serial", 0, 1.0, 0, 0), ("islands", 0, 3.0, 2, 0),
                                                               ("serial", 1, 3.0, 1, 0), ("islands", 1, 1.0, 1, 0),
                                                               ("islands", 1, 3.0, 2, 4)])
def test_target_distributions_are_current(models, monkeypatch, resampling, radius, cfg, seed, recheck):
    """Every distribution the verifier or resampler reads equals the target's distribution given the
    tokens as they are at that moment (wave_feed "span"; "local" waves are tested below, and their verify
    calls are checked here too via _target_probs). Regression: when a chunk's resampling ended before its
    last position, the resampled tokens' K/V stayed stale and the next chunk's verify attended them."""
    target = models[4]
    sampling = SamplingConfig(cfg_scale=cfg, temperature=1.0)
    labels = torch.tensor([1, 2, 3])
    errors: list[float] = []
    original = speculative.Speculative._target_probs

    def checked(self, lo, hi):
        out = original(self, lo, hi)
        ref = teacher_forced_probs(target, labels, self.tokens, sampling)[:, lo:hi]
        errors.append(float((out - ref).abs().max()))
        return out

    monkeypatch.setattr(speculative.Speculative, "_target_probs", checked)
    method = spec(rule="mulo", tau=0.5, k=10, radius=radius, rejection="local", resampling=resampling, recheck=recheck,
                  feed="span")
    res = generate(target, labels, sampling, method, drafter=models["same"], seed=seed, decode=False)
    # the run has the regression's situation: a chunk (row) before the last one whose last position
    # every sample accepted while some sample resampled an earlier position
    rows = map_codes(res.maps).view(3, 4, 4)[:, :3]
    if recheck:   # the recheck rounds ran: their calls were checked too
        assert res.stats.rechecked > 0
    else:
        assert bool(((rows[:, :, -1] == ACCEPTED).all(0) & (rows != ACCEPTED).any(-1).any(0)).any())
    assert len(errors) >= 4 and max(errors) < 1e-5


@pytest.mark.parametrize("cfg,radius", [(1.0, 1), (3.0, 0)])
def test_local_waves_feed_only_what_changed(models, monkeypatch, cfg, radius):
    """wave_feed "local": a wave call feeds the tokens the previous wave sampled and the token before each
    position it samples, nothing else; and the next verify call still sees exact K/V (its distributions
    are checked against teacher forcing). How much it saves is measured by bench.costs on real chunks."""
    target = models[8]
    sampling = SamplingConfig(cfg_scale=cfg, temperature=1.0)
    labels = torch.tensor([4])
    fed: dict[str, list[int]] = {}
    errors: list[float] = []
    original_wave, original_probs = speculative.Speculative._resample_local, speculative.Speculative._target_probs
    for feed in ("span", "local"):
        sizes = fed.setdefault(feed, [])
        real = target.forward_tokens

        def counting(tokens, positions, cache, *a, _sizes=sizes, **kw):
            _sizes.append(len(positions))
            return real(tokens, positions, cache, *a, **kw)

        waves: list[list[list[int]]] = []

        def recording(self, w, base, lo, probs):
            waves.append([[base + p for _, p in wave] for wave in w])
            before = len(sizes)
            out = original_wave(self, w, base, lo, probs)
            for i, n in enumerate(sizes[before:], start=1):   # call i serves wave i (wave 0 reads the verify)
                assert n <= len(waves[-1][i - 1]) + len(waves[-1][i])
            return out

        def checked(self, lo, hi):
            out = original_probs(self, lo, hi)
            ref = teacher_forced_probs(target, labels, self.tokens, sampling)[:, lo:hi]
            errors.append(float((out - ref).abs().max()))
            return out

        monkeypatch.setattr(target, "forward_tokens", counting)
        monkeypatch.setattr(speculative.Speculative, "_resample_local", recording)
        monkeypatch.setattr(speculative.Speculative, "_target_probs", checked)
        method = spec(rule="mulo", tau=0.6, k=4, radius=radius, rows_per_step=1, feed=feed)
        res = generate(target, labels, sampling, method, drafter=models[2], seed=3, decode=False)
        monkeypatch.undo()
        if feed == "local":
            assert any(len(w) > 1 for w in waves), "the run must resample more than one wave"
    assert max(errors) < 1e-5


# ----------------------------------------------------------------------------- recheck (our extension)
def stale_acceptances(target, labels, res, sampling, tau) -> int:
    """Accepted drafts whose target probability, given the final tokens before them, is below tau."""
    p = teacher_forced_probs(target, labels, res.tokens, sampling).gather(-1, res.tokens[..., None])[..., 0]
    return int(((map_codes(res.maps) == ACCEPTED) & (p < tau)).sum())


@pytest.mark.parametrize("drafter,resampling", [(2, "islands"), ("same", "islands"), (2, "serial")])
def test_recheck_keeps_only_drafts_the_final_context_accepts(models, drafter, resampling):
    """The paper's verifier judges a draft in the context of the drafts before it; when one of those is
    resampled, an accepted draft may no longer pass. recheck verifies again until none fails."""
    target, labels = models[4], torch.tensor([0, 3, 5, 6])
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=4)
    stale = {0: 0, 16: 0}
    for seed in range(6):
        for recheck in stale:
            method = spec(rule="mulo", tau=0.3, k=1, radius=0, resampling=resampling, recheck=recheck)
            res = generate(target, labels, sampling, method, drafter=models[drafter], seed=seed, decode=False)
            stale[recheck] += stale_acceptances(target, labels, res, sampling, 0.3)
            s, codes = res.stats, map_codes(res.maps)
            assert s.accepted + s.resampled == 16 * len(labels) and int((codes == ACCEPTED).sum()) == s.accepted
            assert int(((codes == REJECTED) | (codes == NEIGHBOUR)).sum()) == s.resampled
            assert s.rechecked <= s.resampled and (recheck or s.rechecked == 0)
            assert len(s.waves) == s.steps
    assert stale[0] > 0          # the situation arises without recheck ...
    assert stale[16] == 0        # ... and recheck removes it


def test_recheck_all_leaves_no_token_the_final_context_rules_out(models):
    """Scope "all" also verifies resampled tokens whose context changed after they were sampled: at the
    end every accepted draft passes in its final context, and no token is impossible there (p = 0 under
    top-k), which scope "drafts" leaves behind (island waves sample before other islands are final)."""
    target, labels = models[4], torch.tensor([0, 3, 5, 6])
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=2)
    impossible = {"drafts": 0, "all": 0}
    for seed in range(6):
        for scope in impossible:
            method = spec(rule="mulo", tau=0.3, k=1, radius=1, recheck=16, scope=scope)
            res = generate(target, labels, sampling, method, drafter=models[2], seed=seed, decode=False)
            p = teacher_forced_probs(target, labels, res.tokens, sampling).gather(-1, res.tokens[..., None])[..., 0]
            impossible[scope] += int((p == 0).sum())
            assert stale_acceptances(target, labels, res, sampling, 0.3) == 0
            s, codes = res.stats, map_codes(res.maps)
            assert s.accepted + s.resampled == 16 * len(labels) and int((codes == ACCEPTED).sum()) == s.accepted
            assert int(((codes == REJECTED) | (codes == NEIGHBOUR)).sum()) == s.resampled
    assert impossible["drafts"] > 0 and impossible["all"] == 0


def test_recheck_zero_is_the_papers_method(models):
    sampling = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=4)
    a = generate(models[4], torch.tensor([1, 2]), sampling, spec(k=1), drafter=models[2], seed=3, decode=False)
    b = generate(models[4], torch.tensor([1, 2]), sampling, spec(k=1, recheck=0), drafter=models[2], seed=3, decode=False)
    assert torch.equal(a.tokens, b.tokens) and a.stats.rechecked == 0


@pytest.mark.parametrize("grid,radius,rows", [(8, 0, 1), (8, 0, 2), (8, 1, 1), (8, 1, 2)])
def test_recheck_all_under_greedy_sampling_is_greedy_ar(models, grid, radius, rows):
    """With greedy sampling every token has probability 1 or 0, so a run in which every token was judged
    in its final context is greedy AR token for token. Island waves sample several islands from one
    context read: the later islands of a wave are stale at once and must be checked again too."""
    sampling = SamplingConfig(cfg_scale=1.0, temperature=0.0)
    labels = torch.tensor([0, 3, 5, 6])
    ar = generate_ar(models[grid], labels, sampling, decode=False)
    method = spec(rule="mulo", tau=0.3, k=1, radius=radius, recheck=64, scope="all", rows_per_step=rows, kind="nearest")
    rounds = 0
    for seed in range(3):
        res = generate(models[grid], labels, sampling, method, drafter=models[2], seed=seed, decode=False)
        assert res.stats.recheck_exhausted == 0
        assert torch.equal(res.tokens, ar.tokens), f"seed {seed}: {int((res.tokens != ar.tokens).sum())} tokens differ"
        rounds += res.stats.recheck_rounds
    assert rounds > 0   # the case needs recheck


def test_recheck_counts_its_rounds_and_the_steps_that_ran_out(models):
    """recheck_rounds counts rounds that found a failure; recheck_exhausted the steps whose last round still
    resampled (so tokens it made stale went unverified). With one round the two are the same."""
    target, labels = models[4], torch.tensor([0, 3, 5, 6])
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=2)
    seen = {0: 0, 1: 0, 16: 0}
    for seed in range(4):
        for recheck in seen:
            method = spec(rule="mulo", tau=0.3, k=1, radius=1, recheck=recheck, scope="all")
            s = generate(target, labels, sampling, method, drafter=models[2], seed=seed, decode=False).stats
            assert s.recheck_rounds <= recheck * s.steps and s.recheck_exhausted <= s.steps
            if recheck == 1:
                assert s.recheck_exhausted == s.recheck_rounds
            seen[recheck] += s.recheck_rounds
            assert (s.recheck_rounds > 0) <= (s.rechecked > 0)
    assert seen[0] == 0 and seen[1] > 0 and seen[16] >= seen[1]


@pytest.mark.parametrize("kwargs", [dict(rule="exact"), dict(rule="lantern"), dict(rule="gsd")])
def test_recheck_needs_a_repeatable_test(kwargs):
    with pytest.raises(ValueError, match="recheck needs a deterministic rule that can be repeated .* set recheck to 0"):
        VerifierConfig(recheck=2, **kwargs)


def test_recheck_is_a_no_op_under_raster_rejection(models):
    """Nothing is kept after a raster rejection, so there is nothing to recheck: same tokens, same calls."""
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=4)
    runs = [generate(models[4], torch.tensor([1, 2]), sampling, spec(rejection="raster", recheck=n, k=1),
                     drafter=models[2], seed=3, decode=False) for n in (0, 16)]
    assert torch.equal(runs[0].tokens, runs[1].tokens) and runs[1].stats.rechecked == 0
    assert runs[0].stats.target_calls == runs[1].stats.target_calls


# ----------------------------------------------------------------------------- parameter errors
@pytest.mark.parametrize("kwargs,name", [
    (dict(rule="nope"), "rule"), (dict(rejection="nope"), "rejection"), (dict(resampling="nope"), "resampling"),
    (dict(tau=-0.1), "tau"), (dict(k_neighbours=0), "k_neighbours"), (dict(expansion_radius=-1), "expansion_radius"),
    (dict(lantern_delta=-1.0), "lantern_delta"), (dict(lantern_k=-1), "lantern_k"), (dict(recheck=-1), "recheck"),
    (dict(recheck_scope="every"), "recheck_scope"), (dict(gsd_rank_window=-1), "gsd_rank_window"),
    (dict(gsd_p_thr=-0.1), "gsd_p_thr"), (dict(gsd_d_thr=-0.1), "gsd_d_thr"),
])
def test_bad_verifier_parameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        VerifierConfig(**kwargs)


@pytest.mark.parametrize("kwargs,name", [
    (dict(method="nope"), "method"), (dict(rows_per_step=0), "rows_per_step"), (dict(zipar_window=0), "zipar_window"),
    (dict(sjd_window=0), "sjd_window"), (dict(parallel_window=-1), "parallel_window"),
    (dict(draft_len=-1), "draft_len"),
])
def test_bad_method_parameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MethodConfig(**kwargs)


def test_speculative_needs_a_drafter(target4):
    with pytest.raises(ValueError, match="drafter"):
        generate(target4, torch.tensor([0]), SamplingConfig(), MethodConfig(), decode=False)


def test_decode_returns_images(models):
    res = generate(models[4], torch.tensor([1, 2]), GREEDY, spec(), drafter=models[2], decode=True)
    assert res.images.shape == (2, 3, 16, 16)
    assert float(res.images.min()) >= 0 and float(res.images.max()) <= 1
    assert res.stats.seconds["total"] > 0


@pytest.mark.parametrize("recheck", [0, 4])
def test_grouped_rule_runs_with_a_low_resolution_drafter(models, recheck):
    """rule "grouped" (GSD's group pooled against tau) needs no drafter probability, so it runs with upsampled
    drafts, and as a deterministic test it can be rechecked; tau above 1 rejects everything, as for mulo."""
    res = generate(models[4], torch.tensor([1, 2]), SamplingConfig(cfg_scale=1.0),
                   spec(rule="grouped", tau=0.02, radius=0, recheck=recheck, rows_per_step=2), drafter=models[2], seed=1,
                   decode=False)
    s = res.stats
    assert s.accepted + s.resampled == 32 and 0 < s.accepted
    none = generate(models[4], torch.tensor([1]), SamplingConfig(cfg_scale=1.0), spec(rule="grouped", tau=1.05),
                    drafter=models[2], seed=1, decode=False)
    assert none.stats.accepted == 0


# ----------------------------------------------------------------------------- pool commit
def test_pool_commit_draws_inside_the_pool_from_the_target(models, monkeypatch):
    """VerifierConfig.commit = "pool": each accepted position ends up holding a code of its draft's neighbour
    pool that the target gave mass to, at least one moves, and the next verify still reads exact K/V."""
    target = models[4]
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0)
    labels = torch.tensor([1, 2])
    seen, errors = [], []
    original, probs_of = speculative.Speculative._pool_commit, speculative.Speculative._target_probs

    def spy(self, f, e, probs):
        before = self.tokens[:, f:e].clone()
        original(self, f, e, probs)
        acc = self.codes[:, f:e] == ACCEPTED
        pool = self.tables.neighbours.long()[before]                                    # [B, n, k]
        inside = (pool == self.tokens[:, f:e, None]).any(-1)
        mass = probs[:, :e - f].gather(-1, self.tokens[:, f:e, None])[..., 0]
        seen.append((bool((inside | ~acc).all()), bool(((mass > 0) | ~acc).all()),
                     int((acc & (before != self.tokens[:, f:e])).sum())))

    def checked(self, lo, hi):
        out = probs_of(self, lo, hi)
        errors.append(float((out - teacher_forced_probs(target, labels, self.tokens, sampling)[:, lo:hi]).abs().max()))
        return out

    monkeypatch.setattr(speculative.Speculative, "_pool_commit", spy)
    monkeypatch.setattr(speculative.Speculative, "_target_probs", checked)
    method = spec(rule="mulo", tau=0.1, k=8, radius=0, feed="span")
    method = MethodConfig(method="speculative", verifier=VerifierConfig(**{**method.verifier.__dict__, "commit": "pool"}),
                          upsampler=method.upsampler)
    res = generate(target, labels, sampling, method, drafter=models[2], seed=3, decode=False)
    assert res.stats.accepted > 0 and seen
    assert all(i and m for i, m, _ in seen) and sum(n for *_, n in seen) > 0
    assert max(errors) < 1e-5


def test_pool_commit_needs_the_mulo_rule_under_local_rejection():
    with pytest.raises(ValueError, match="commit 'pool'.*rule 'lantern'"):
        VerifierConfig(rule="lantern", rejection="raster", commit="pool")
    with pytest.raises(ValueError, match="commit 'pool'.*raster rejection"):
        VerifierConfig(rule="mulo", rejection="raster", commit="pool")
    with pytest.raises(ValueError, match="verifier commit must be one of"):
        VerifierConfig(commit="target")
