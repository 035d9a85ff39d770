"""Quality measures that can fail, and the two quality tiers (issue 33; docs/DESIGN.md section 10.5).

The classifier's accuracy and the Frechet distance in its features cannot tell a drafter's smooth image
lifted to the target's grid from the target's own samples. These measures can:

- C2ST (two-sample classifier test): a detector is trained to tell set A from set B and scored on
  held-out pairs; 0.5 means indistinguishable. Pair i (sample i of both sets: the same class, the same
  seed) is held out together, so a detector never learns from the seed it is scored on. Three detectors of
  different kinds, the strongest of which is the verdict: a small CNN on pixels, logistic regression on
  spectral features (radially averaged power spectrum, Laplacian energy, colour moments) and logistic
  regression on token statistics (code histogram, unique codes, neighbour repeats).
- Multi-scale patch SWD: sliced Wasserstein distance between 7 x 7 patches of the Laplacian pyramid
  (64, 32, 16 px), normalised by the reference set's statistics, so a lack of fine texture shows at the
  full-resolution level.
- Precision and recall (k-NN manifolds, k = 3) in the classifier's features and in spectral features.
- Diversity: unique codes per image, within-class pairwise pixel distance, high-frequency energy (mean
  absolute Laplacian of luminance), each as a ratio to AR's.
- NLL gap to AR in both directions: a method more typical than the target's own samples (lower NLL) is
  not better, it is less varied.

Everything is plain torch / numpy on the CPU, seeded, and uses the threads torch is set to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------- tiers
# Defined once here: the sweep, the report, the demo and the README all read them from this module.
TIER_MIN_SAMPLES = 400          # images per side a tier verdict needs to pass
C2ST_MAX = 0.55                 # "indistinguishable": every detector's C2ST against AR at most this
C2ST_REAL_TOL = 0.03            # "as good as AR": C2ST against real at most AR's + this
SWD_TOL = 1.10                  # ... each patch-SWD level at most this x AR's
PR_TOL = 0.03                   # ... precision and recall at least AR's - this
NULL_BAND = 0.03                # the null row (AR against AR, other seeds) must sit within 0.5 +- this
DIVERSITY_BAND = 0.10           # blindness test only: a diversity ratio outside 1 +- this separates
NLL_BAND = 0.10                 # blindness test only: an NLL gap beyond this (nats/token) separates
ACC_TOL, FD_TOL = 0.03, 0.15    # the old columns' rule (bench.sweep), kept for the blindness table

INDISTINGUISHABLE, AS_GOOD, OUTSIDE = "indistinguishable", "as good as AR", "outside the tiers"
TIERS = (INDISTINGUISHABLE, AS_GOOD)
TIER_RULE = (f"{INDISTINGUISHABLE}: every detector's C2ST against AR <= {C2ST_MAX} at >= {TIER_MIN_SAMPLES} images "
             f"per side; {AS_GOOD}: against real data no measure worse than AR's beyond the null's noise (strongest "
             f"C2ST against VQ-round-tripped real <= AR's + {C2ST_REAL_TOL}, each patch-SWD level <= {SWD_TOL} x AR's, "
             f"precision and recall in both feature spaces >= AR's - {PR_TOL}); a setting indistinguishable from AR "
             f"counts as good as AR. A failed test fails at any sample count; a pass needs {TIER_MIN_SAMPLES} per side.")

DETECTORS = ("cnn", "spectral", "tokens")
SWD_LEVELS = ("full", "half", "quarter")
PR_SPACES = ("classifier", "spectral")
DIVERSITY = ("unique_codes", "pairwise", "hf_energy")
C2ST_FOLDS = 4             # folds of pairs for the linear detectors
CNN_FOLDS = 2              # ... and for the CNN (half the pairs train it: a third of the cost of 4 folds)
MIN_SAMPLES = 8            # fewer images per set than this: no C2ST or precision / recall (too few pairs)
PR_SPECTRAL_DIMS = 8        # principal axes of the spectral space for precision / recall
N_BOOT = 1000


@dataclass
class SampleSet:
    """The images of one method or control, aligned by sample (i: class i % classes, seed i)."""
    images: torch.Tensor                    # [N, 3, H, W] uint8 or float in [0, 1]
    tokens: torch.Tensor | None             # [N, L] codes (None where a set has no tokens)
    features: np.ndarray | None = None      # [N, F] classifier features
    classes: np.ndarray | None = None       # [N] class ids

    def __post_init__(self) -> None:
        if self.images.dim() != 4 or self.images.shape[1] != 3:
            raise ValueError(f"images must be [N, 3, H, W], got {tuple(self.images.shape)}")
        if self.tokens is not None and self.tokens.shape[0] != self.images.shape[0]:
            raise ValueError(f"{self.tokens.shape[0]} token rows for {self.images.shape[0]} images")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def float_images(self) -> torch.Tensor:
        x = self.images
        return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """Images in [0, 1] -> uint8 (what a saved image holds; a quarter of the memory of float32)."""
    return (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu()


# ------------------------------------------------------------------------------------------- features
def luminance(x: torch.Tensor) -> torch.Tensor:
    return 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]


_LAPLACE = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def laplacian(y: torch.Tensor) -> torch.Tensor:
    """Discrete Laplacian [N, H-2, W-2] of luminance images [N, H, W] (no padding: no edge artefact)."""
    return F.conv2d(y[:, None], _LAPLACE.to(y)[None, None])[:, 0]


def hf_energy(x: torch.Tensor) -> np.ndarray:
    """Mean absolute Laplacian of luminance per image [N]: how much fine texture an image carries."""
    return laplacian(luminance(x)).abs().mean((1, 2)).numpy().astype(np.float64)


def _radial_spectrum(ch: torch.Tensor, bins: int) -> torch.Tensor:
    """log power [N, bins] of [N, H, W], averaged over rings of the 2-D spectrum."""
    n, h, w = ch.shape
    p = torch.fft.fft2(ch - ch.mean((1, 2), keepdim=True)).abs().pow(2)
    fy, fx = torch.fft.fftfreq(h), torch.fft.fftfreq(w)
    r = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2) / 0.5          # 0 .. sqrt(2)
    idx = (r.clamp(max=1.0 - 1e-6) * bins).long().flatten()
    out = torch.zeros(n, bins).index_add_(1, idx, p.flatten(1))
    count = torch.bincount(idx, minlength=bins).clamp_min(1)
    return (out / count).add(1e-8).log()


def spectral_features(images: torch.Tensor, bins: int = 24) -> np.ndarray:
    """[N, F] texture features of images [N, 3, H, W] in [0, 1]: the radial log power spectrum of luminance
    and of the two colour differences, the Laplacian's mean |.|, std and high quantiles at full and half
    resolution, and per-channel mean and std."""
    x = images.float()
    y = luminance(x)
    parts = [_radial_spectrum(y, bins), _radial_spectrum(x[:, 0] - x[:, 1], bins // 2),
             _radial_spectrum(x[:, 2] - x[:, 1], bins // 2)]
    for img in (y, F.avg_pool2d(y[:, None], 2)[:, 0]):
        lap = laplacian(img).abs().flatten(1)
        parts.append(torch.stack([lap.mean(1), lap.std(1), lap.quantile(0.9, dim=1), lap.quantile(0.99, dim=1)], 1))
    parts += [x.mean((2, 3)), x.std((2, 3))]
    return torch.cat(parts, 1).numpy().astype(np.float64)


def token_features(tokens: torch.Tensor, vocab: int, grid: int) -> np.ndarray:
    """[N, vocab + 4] token statistics: log code histogram, unique codes, histogram entropy, and how often a
    code repeats its right and lower neighbour (a lifted low-res draft repeats codes in 2 x 2 blocks)."""
    t = tokens.long().cpu()
    n = t.shape[0]
    hist = torch.zeros(n, vocab).scatter_add_(1, t, torch.ones_like(t, dtype=torch.float))
    p = hist / hist.sum(1, keepdim=True)
    entropy = -(p * p.clamp_min(1e-12).log()).sum(1)
    g = t.reshape(n, grid, grid)
    right = (g[:, :, 1:] == g[:, :, :-1]).float().mean((1, 2))
    down = (g[:, 1:] == g[:, :-1]).float().mean((1, 2))
    return torch.cat([hist.log1p(), torch.stack([(hist > 0).sum(1).float(), entropy, right, down], 1)], 1).numpy()


def unique_codes(tokens: torch.Tensor) -> np.ndarray:
    return np.array([len(torch.unique(row)) for row in tokens.cpu()], dtype=np.float64)


def pairwise_within_class(images: torch.Tensor, classes: np.ndarray) -> float:
    """Mean RMS pixel distance between two images of the same class (over every class's pairs)."""
    x = images.float().flatten(1)
    dists = []
    for c in np.unique(classes):
        xc = x[torch.as_tensor(classes == c)]
        if len(xc) < 2:
            continue
        d = torch.cdist(xc.double(), xc.double()) / math.sqrt(x.shape[1])
        iu = torch.triu_indices(len(xc), len(xc), 1)
        dists.append(d[iu[0], iu[1]])
    return float(torch.cat(dists).mean()) if dists else float("nan")


# --------------------------------------------------------------------------------------- C2ST detectors
def _folds(n: int, k: int, seed: int) -> np.ndarray:
    """Fold id of each pair i (both sets' sample i share it)."""
    perm = np.random.default_rng(seed).permutation(n)
    f = np.empty(n, dtype=np.int64)
    f[perm] = np.arange(n) % k
    return f


def _logistic_scores(xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, l2: float = 1e-2) -> torch.Tensor:
    """L2-regularised logistic regression (LBFGS, standardised inputs): logits of the test rows."""
    mu, sd = xtr.mean(0), xtr.std(0).clamp_min(1e-6)
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    w = torch.zeros(xtr.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        z = xtr @ w[:-1] + w[-1]
        loss = F.binary_cross_entropy_with_logits(z, ytr) + l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
    with torch.no_grad():
        return xte @ w[:-1] + w[-1]


class _PixelCNN(torch.nn.Module):
    """A small CNN for telling two image sets apart. It sees the image and its luminance Laplacian (fine
    texture is what an unverified draft lacks), strided 3x3 convs, then global mean and std pooling
    (texture statistics survive the pooling) and a linear head."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        c = (4, width, 2 * width, 2 * width)
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(c[i], c[i + 1], 3, stride=2, padding=1) for i in range(3))
        self.head = torch.nn.Linear(2 * sum(c[1:]), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lap = F.pad(laplacian(luminance(x)), (1, 1, 1, 1))[:, None] * 4
        h = torch.cat([(x - 0.5) * 2, lap], 1)
        pooled = []
        for conv in self.convs:
            h = F.leaky_relu(conv(h), 0.1)
            pooled += [h.mean((2, 3)), h.std((2, 3))]
        return self.head(torch.cat(pooled, 1))[:, 0]


def _cnn_scores(xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, seed: int, epochs: int = 15,
                batch: int = 32) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _PixelCNN()
        opt = torch.optim.Adam(net.parameters(), lr=2e-3, weight_decay=1e-4)
        ytr = ytr.float()
        for _ in range(epochs):
            net.train()
            perm = torch.randperm(len(xtr))
            for s in range(0, len(xtr), batch):
                idx = perm[s:s + batch]
                xb = xtr[idx]
                flip = torch.rand(len(idx)) < 0.5                   # the scenes are not left-right specific
                xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
                loss = F.binary_cross_entropy_with_logits(net(xb), ytr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        net.eval()
        with torch.no_grad():
            return torch.cat([net(xte[s:s + 256]) for s in range(0, len(xte), 256)])


@dataclass
class C2ST:
    accuracy: float
    ci: list[float]
    samples: int           # pairs


def c2st(inputs_a, inputs_b, detector: str, folds: int | None = None, seed: int = 0, n_boot: int = N_BOOT) -> C2ST:
    """Held-out accuracy of `detector` ("cnn": inputs are images [N, 3, H, W]; "logistic": feature rows
    [N, F]) telling set a from set b, cross-validated over folds of pairs; 95% interval: a bootstrap over
    pairs (a pair's two verdicts resampled together)."""
    xa, xb = torch.as_tensor(inputs_a), torch.as_tensor(inputs_b)
    folds = folds or (CNN_FOLDS if detector == "cnn" else C2ST_FOLDS)
    n = min(len(xa), len(xb))
    if n < folds:
        raise ValueError(f"C2ST needs at least {folds} pairs, got {n}")
    xa, xb = xa[:n], xb[:n]
    if detector == "cnn":
        xa, xb = xa.float(), xb.float()
    else:
        xa, xb = xa.double(), xb.double()
    fold = _folds(n, folds, seed)
    right = np.zeros((n, 2))
    for k in range(folds):
        tr, te = torch.as_tensor(fold != k), torch.as_tensor(fold == k)
        xtr = torch.cat([xa[tr], xb[tr]])
        ytr = torch.cat([torch.zeros(int(tr.sum())), torch.ones(int(tr.sum()))]).to(xtr.dtype)
        xte = torch.cat([xa[te], xb[te]])
        z = _cnn_scores(xtr, ytr, xte, seed + k) if detector == "cnn" else _logistic_scores(xtr, ytr.double(), xte)
        m = int(te.sum())
        pred = (z > 0).numpy()
        right[fold == k, 0] = ~pred[:m]
        right[fold == k, 1] = pred[m:]
    per_pair = right.mean(1)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    lo, hi = np.quantile(per_pair[idx].mean(1), [0.025, 0.975])
    return C2ST(float(per_pair.mean()), [float(lo), float(hi)], n)


def detector_inputs(s: SampleSet, detector: str, vocab: int, grid: int):
    if detector == "cnn":
        return s.float_images()
    if detector == "spectral":
        return spectral_features(s.float_images())
    if detector == "tokens":
        if s.tokens is None:
            raise ValueError("the token detector needs the set's tokens")
        return token_features(s.tokens, vocab, grid)
    raise ValueError(f"unknown detector {detector!r}; choose from {DETECTORS}")


def c2st_all(a: SampleSet, b: SampleSet, vocab: int, grid: int, detectors=DETECTORS, seed: int = 0) -> dict:
    """Every detector's C2ST of a against b, and the strongest: {"cnn": {...}, ..., "max": accuracy}."""
    out = {}
    for d in detectors:
        r = c2st(detector_inputs(a, d, vocab, grid), detector_inputs(b, d, vocab, grid), d, seed=seed)
        out[d] = {"accuracy": r.accuracy, "ci": r.ci, "pairs": r.samples}
    out["max"] = max(out[d]["accuracy"] for d in detectors)
    out["max_detector"] = max(detectors, key=lambda d: out[d]["accuracy"])
    return out


# ------------------------------------------------------------------------------------------ patch SWD
_BINOMIAL = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0


def _blur_down(x: torch.Tensor) -> torch.Tensor:
    k = (_BINOMIAL[:, None] * _BINOMIAL[None, :]).to(x)[None, None].repeat(x.shape[1], 1, 1, 1)
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), k, groups=x.shape[1])[:, :, ::2, ::2]


def laplacian_pyramid(x: torch.Tensor, levels: int = 3) -> list[torch.Tensor]:
    """Band-pass levels, finest first; the last level is the low-pass image itself."""
    out = []
    for _ in range(levels - 1):
        low = _blur_down(x)
        up = F.interpolate(low, size=x.shape[-2:], mode="bilinear", align_corners=False)
        out.append(x - up)
        x = low
    return out + [x]


def _patches(level: torch.Tensor, per_image: int, size: int, rng: np.random.Generator) -> torch.Tensor:
    n, c, h, w = level.shape
    ys = torch.as_tensor(rng.integers(0, h - size + 1, size=(n, per_image)))
    xs = torch.as_tensor(rng.integers(0, w - size + 1, size=(n, per_image)))
    off = torch.arange(size)
    rows = (ys[..., None] + off)[..., :, None].expand(n, per_image, size, size)
    cols = (xs[..., None] + off)[..., None, :].expand(n, per_image, size, size)
    b = torch.arange(n)[:, None, None, None].expand_as(rows)
    p = level.permute(0, 2, 3, 1)[b, rows, cols]                  # [N, P, size, size, C]
    return p.reshape(n * per_image, -1)


def patch_swd(images: torch.Tensor, reference: torch.Tensor, per_image: int = 64, size: int = 7,
              projections: int = 256, seed: int = 0) -> dict[str, float]:
    """Sliced Wasserstein distance x 1e3 between 7 x 7 patches of the two sets' Laplacian pyramids, per level
    ("full", "half", "quarter"); patches of both sets are normalised by the reference's per-channel mean and
    std at that level, so a set missing fine texture is far at the full level. A level smaller than the
    patch (tiny test images) is measured with patches as large as the level."""
    n = min(len(images), len(reference))
    out = {}
    pa, pb = laplacian_pyramid(images[:n].float()), laplacian_pyramid(reference[:n].float())
    for name, la, lb in zip(SWD_LEVELS, pa, pb):
        rng = np.random.default_rng(seed)
        s = min(size, *la.shape[-2:])
        xa, xb = _patches(la, per_image, s, rng), _patches(lb, per_image, s, rng)
        mu = lb.mean((0, 2, 3)).repeat(s * s)
        sd = lb.std((0, 2, 3)).clamp_min(1e-8).repeat(s * s)
        xa, xb = (xa - mu) / sd, (xb - mu) / sd
        g = torch.Generator().manual_seed(seed)
        dirs = torch.randn(xa.shape[1], projections, generator=g)
        dirs /= dirs.norm(dim=0, keepdim=True)
        a, _ = (xa @ dirs).sort(0)
        b, _ = (xb @ dirs).sort(0)
        out[name] = float((a - b).abs().mean()) * 1e3
    return out


# ------------------------------------------------------------------------------ precision and recall
def precision_recall(gen: np.ndarray, real: np.ndarray, k: int = 3) -> tuple[float, float]:
    """k-NN manifold precision (share of generated samples inside the real manifold: within the k-th
    neighbour distance of some real sample) and recall (the same with the roles swapped)."""
    g, r = torch.as_tensor(gen, dtype=torch.float64), torch.as_tensor(real, dtype=torch.float64)
    n = min(len(g), len(r))
    g, r = g[:n], r[:n]
    if n <= k:
        raise ValueError(f"precision/recall with k = {k} needs more than {k} samples per set, got {n}")

    def radii(x):
        d = torch.cdist(x, x)
        return d.kthvalue(k + 1, dim=1).values            # the 0th neighbour is the sample itself

    rr, rg = radii(r), radii(g)
    d = torch.cdist(g, r)                                 # [gen, real]
    precision = (d <= rr[None, :]).any(1).double().mean()
    recall = (d.T <= rg[None, :]).any(1).double().mean()
    return float(precision), float(recall)


def _standardise(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return (x - ref.mean(0)) / np.maximum(ref.std(0), 1e-8)


# ------------------------------------------------------------------------------------------ the columns
@dataclass
class Context:
    """What every row is measured against: AR's set, real images (raw and through the VQ)."""
    ar: SampleSet
    real: SampleSet           # raw real images (patch SWD)
    real_vq: SampleSet        # the same real images encoded and decoded by the VQ, with classifier features: what a
                              # token model can at best produce (C2ST, precision and recall against real)
    vocab: int
    grid: int
    ar_nll: np.ndarray | None = None

    def __post_init__(self) -> None:
        ref = spectral_features(self.real_vq.float_images())
        self._mu, self._sd = ref.mean(0), np.maximum(ref.std(0), 1e-8)
        # k-NN manifolds need few dimensions: the real set's first principal axes of the standardised features
        _, _, vt = np.linalg.svd((ref - self._mu) / self._sd, full_matrices=False)
        self._axes = vt[:PR_SPECTRAL_DIMS].T
        self._cache: dict = {}

    def spectral(self, s: SampleSet) -> np.ndarray:
        """A set's spectral features in the real set's principal axes ([N, PR_SPECTRAL_DIMS])."""
        return ((spectral_features(s.float_images()) - self._mu) / self._sd) @ self._axes


def measure(s: SampleSet, ctx: Context, nll: np.ndarray | None = None, against_ar: bool = True,
            detectors=DETECTORS, seed: int = 0) -> dict:
    """Every quality column of one set (see the module docstring); ratios and gaps against ctx.ar."""
    out: dict = {"samples": len(s)}
    enough = min(len(s), len(ctx.ar), len(ctx.real_vq)) >= MIN_SAMPLES      # else the tests are left out (None)
    out["c2st_ar"] = c2st_all(s, ctx.ar, ctx.vocab, ctx.grid, detectors, seed) if against_ar and enough else None
    out["c2st_real"] = c2st_all(s, ctx.real_vq, ctx.vocab, ctx.grid, detectors, seed + 1) if enough else None
    out["swd"] = patch_swd(s.float_images(), ctx.real.float_images(), seed=seed)
    pr, ref = {}, ctx.real_vq
    if enough and s.features is not None and ref.features is not None:
        pr["classifier"] = precision_recall(_standardise(s.features, ref.features), _standardise(ref.features, ref.features))
    if enough:
        pr["spectral"] = precision_recall(ctx.spectral(s), ctx.spectral(ref))
    out["precision"] = {sp: v[0] for sp, v in pr.items()} or None
    out["recall"] = {sp: v[1] for sp, v in pr.items()} or None
    key = "ar_diversity"
    if key not in ctx._cache:
        ctx._cache[key] = _diversity(ctx.ar)
    mine, ar = _diversity(s), ctx._cache[key]
    out["diversity"] = {d: mine[d] for d in DIVERSITY}
    out["diversity_ratio"] = {d: (mine[d] / ar[d] if ar[d] else None) for d in DIVERSITY}
    if nll is not None and ctx.ar_nll is not None and len(nll) and len(ctx.ar_nll):
        gap = float(np.mean(nll) - np.mean(ctx.ar_nll))
        out["nll_gap"] = gap
        out["nll_gap_abs"] = abs(gap)
    return out


def _diversity(s: SampleSet) -> dict:
    x = s.float_images()
    return {"unique_codes": float(unique_codes(s.tokens).mean()) if s.tokens is not None else float("nan"),
            "pairwise": pairwise_within_class(x, s.classes if s.classes is not None else np.zeros(len(s), int)),
            "hf_energy": float(hf_energy(x).mean())}


# -------------------------------------------------------------------------------- tiers and blindness
def _fails_as_good(row: dict, ar: dict) -> list[str]:
    """Reasons a row is not as good as AR against real data (empty: as good)."""
    why = []
    c, ca = (row.get("c2st_real") or {}).get("max"), (ar.get("c2st_real") or {}).get("max")
    if c is None or ca is None:
        why.append("no C2ST against real")
    elif c > ca + C2ST_REAL_TOL + 1e-12:
        why.append(f"C2ST vs real {c:.3f} > AR's {ca:.3f} + {C2ST_REAL_TOL}")
    for lvl in SWD_LEVELS:
        v, va = (row.get("swd") or {}).get(lvl), (ar.get("swd") or {}).get(lvl)
        if v is None or va is None:
            why.append(f"no SWD at {lvl}")
        elif v > SWD_TOL * va + 1e-12:
            why.append(f"SWD {lvl} {v:.0f} > {SWD_TOL} x AR's {va:.0f}")
    for m in ("precision", "recall"):
        for sp, va in (ar.get(m) or {}).items():
            v = (row.get(m) or {}).get(sp)
            if v is None or v < va - PR_TOL - 1e-12:
                why.append(f"{m} ({sp}) {v if v is None else round(v, 3)} < AR's {va:.3f} - {PR_TOL}")
    return why


def _fails_indistinguishable(row: dict) -> list[str]:
    c = row.get("c2st_ar")
    if not c:
        return ["no C2ST against AR"]
    return [f"C2ST vs AR ({d}) {c[d]['accuracy']:.3f} > {C2ST_MAX}" for d in DETECTORS
            if d in c and c[d]["accuracy"] > C2ST_MAX + 1e-12]


def tier(row: dict, ar: dict) -> dict:
    """The tier verdict of a row's measures (bench.measures.measure) against AR's own row: {"tier": the
    strictest passed (INDISTINGUISHABLE, AS_GOOD) or OUTSIDE, "indistinguishable": bool, "as_good": bool,
    "powered": enough samples for a pass, "why": reasons it fails}."""
    not_ind, not_good = _fails_indistinguishable(row), _fails_as_good(row, ar)
    powered = (row.get("samples") or 0) >= TIER_MIN_SAMPLES
    ind = not not_ind and powered
    good = (not not_good or not not_ind) and powered
    name = INDISTINGUISHABLE if ind else AS_GOOD if good else OUTSIDE
    why = not_ind + not_good
    if not powered and not (not_ind and not_good):
        why = why + [f"only {row.get('samples')} images per side (a pass needs {TIER_MIN_SAMPLES})"]
    return {"tier": name, "indistinguishable": ind, "as_good": good, "powered": powered, "why": why}


SCREEN_SLACK = 0.10     # screening only: SWD may be this much (relative) and precision / recall this much (absolute)
                        # beyond the tier's bound before a few-sample row counts as clearly outside


def screen(row: dict, ar: dict) -> dict:
    """A few-sample verdict for the sweep's screening stages: which tiers a row is not clearly outside.
    A C2ST test fails clearly when its 95% interval lies above the bound (not its point estimate); SWD and
    precision / recall get SCREEN_SLACK. Passing a screen is not a tier: only `tier` at TIER_MIN_SAMPLES is."""
    c = row.get("c2st_ar") or {}
    ind = bool(c) and all(c[d]["ci"][0] <= C2ST_MAX for d in DETECTORS if d in c)
    real, ar_real = row.get("c2st_real") or {}, ar.get("c2st_real") or {}
    good = bool(real) and bool(ar_real) and real[real["max_detector"]]["ci"][0] <= ar_real["max"] + C2ST_REAL_TOL
    for lvl in SWD_LEVELS:
        v, va = (row.get("swd") or {}).get(lvl), (ar.get("swd") or {}).get(lvl)
        good &= v is not None and va is not None and v <= SWD_TOL * (1 + SCREEN_SLACK) * va
    for m in ("precision", "recall"):
        for sp, va in (ar.get(m) or {}).items():
            v = (row.get(m) or {}).get(sp)
            good &= v is not None and v >= va - PR_TOL - SCREEN_SLACK
    return {INDISTINGUISHABLE: ind, AS_GOOD: good or ind}


def in_tier(verdict: dict | None, which: str) -> bool:
    if not verdict:
        return False
    return verdict["indistinguishable"] if which == INDISTINGUISHABLE else verdict["as_good"]


def measure_tests(row: dict, ar: dict) -> dict[str, bool]:
    """Each measure's own test against AR (True: the row fails it), for the blindness table: a measure whose
    test the drafter-alone row passes cannot see what verification is for."""
    t: dict[str, bool] = {}
    for d in DETECTORS:
        c = (row.get("c2st_ar") or {}).get(d)
        if c:
            t[f"C2ST vs AR ({d})"] = c["accuracy"] > C2ST_MAX
        c, ca = (row.get("c2st_real") or {}).get(d), (ar.get("c2st_real") or {}).get(d)
        if c and ca:
            t[f"C2ST vs real ({d})"] = c["accuracy"] > ca["accuracy"] + C2ST_REAL_TOL
    for lvl in SWD_LEVELS:
        v, va = (row.get("swd") or {}).get(lvl), (ar.get("swd") or {}).get(lvl)
        if v is not None and va:
            t[f"SWD {lvl}"] = v > SWD_TOL * va
    for m in ("precision", "recall"):
        for sp, va in (ar.get(m) or {}).items():
            v = (row.get(m) or {}).get(sp)
            if v is not None:
                t[f"{m} ({sp})"] = v < va - PR_TOL
    for d, v in (row.get("diversity_ratio") or {}).items():
        if v is not None and math.isfinite(v):
            t[f"diversity {d}"] = abs(v - 1) > DIVERSITY_BAND
    if row.get("nll_gap") is not None:
        t["NLL gap"] = abs(row["nll_gap"]) > NLL_BAND
    acc, ar_acc = row.get("accuracy"), ar.get("accuracy")
    if acc is not None and ar_acc is not None:
        t["classifier accuracy"] = acc < ar_acc - ACC_TOL
    fd, ar_fd = row.get("fd"), ar.get("fd")
    if fd is not None and ar_fd is not None:
        t["FD"] = fd > (1 + FD_TOL) * ar_fd
    return t


def blind_measures(drafter_alone: dict, ar: dict) -> list[str]:
    """The measures that do not separate the unverified drafter's image from AR's."""
    return [name for name, fails in measure_tests(drafter_alone, ar).items() if not fails]


def null_check(null_row: dict) -> list[str]:
    """Failures of the null control (AR against AR with other seeds): each detector within 0.5 +- NULL_BAND."""
    out = []
    for d in DETECTORS:
        c = (null_row.get("c2st_ar") or {}).get(d)
        if c and abs(c["accuracy"] - 0.5) > NULL_BAND:
            few = (f" (the band is set for {TIER_MIN_SAMPLES} pairs; at {c['pairs']} one standard error is "
                   f"{0.5 / math.sqrt(2 * c['pairs']):.3f})" if c["pairs"] < TIER_MIN_SAMPLES else "")
            out.append(f"null C2ST ({d}) {c['accuracy']:.3f} outside 0.5 +- {NULL_BAND} at {c['pairs']} pairs{few}")
    return out
