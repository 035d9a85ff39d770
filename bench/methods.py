"""Which methods a benchmark runs, and running them: every method on the same batches, interleaved.

`run_methods` returns raw per-run records (wall time, counters, time split, memory, classifier
features, NLL, a few images); bench.summary turns them into the results' "methods". With `resume`, the
records are saved as the run goes and a rerun of the same settings continues after the last saved batch.
"""
from __future__ import annotations

import logging
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass

import torch

from mulosd_core.decode import GenerationResult, generate_ar
from mulosd_core.decode import MethodConfig, generate
from mulosd_core.memory import weight_bytes
from mulosd_core.sampling import SamplingConfig
from mulosd_core.stats import RunStats
from mulosd_core.textbar import TextBar
from mulosd_core.upsample import UpsamplerConfig, upsample_rows

from .measures import to_uint8
from .models import Models
from .quality import REAL_SEED, target_nll

# mulo_no_pooling (k = 1) is left out while the default itself has k = 1 (presets.MULO_K): it would repeat mulo_islands.
# every method of presets.method_presets but mulo_self (the shipped targets are trained at one grid only:
# `--methods ... mulo_self` runs it)
ALL_METHODS = ("ar", "sd", "lantern", "zipar", "sjd", "gsd", "mulo_islands", "mulo_paper", "mulo_grouped", "mulo_serial",
               "mulo_raster", "mulo_no_pooling", "mulo_no_recheck", "mulo_sequential_draft", "mulo_nearest",
               "mulo_embedding", "mulo_learned", "mulo_oracle")
QUICK_METHODS = ("ar", "sd", "lantern", "zipar", "sjd", "gsd", "mulo_serial", "mulo_islands", "mulo_oracle")
QUICK_SAMPLES = 4
ORACLE = "mulo_oracle"
NULL_SEED = 1_000_000            # the null control: AR at seeds i + NULL_SEED
VQ_SEED = REAL_SEED + 1_000_000  # the VQ control: real images at other seeds than the reference's, through the VQ
GRID_METHOD = "mulo_islands"       # the image grid shows AR vs this
WARMUP_SEED = 10_000
TIME_PARTS = ("draft", "upsample", "verify", "resample", "context", "decode", "other")
RESUME_EVERY_S = 120.0    # seconds between two saves of a resumable run's records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Control:
    """A reference row that is not a decoding method (docs/DESIGN.md section 10.5): "null" is AR with other
    seeds (each measure's noise), "drafter_alone" the drafter's own low-res sample lifted by `upsampler` with
    no target call (what verification exists to correct: a measure that passes it is blind), "vq" real images
    at other seeds through the VQ (the ceiling of any token model)."""
    kind: str
    upsampler: str = "pixel"
    method: str = "control"

    def __post_init__(self) -> None:
        if self.kind not in CONTROL_KINDS:
            raise ValueError(f"control kind must be one of {CONTROL_KINDS}, got {self.kind!r}")

    def to_dict(self) -> dict:
        return asdict(self)


CONTROL_KINDS = ("null", "drafter_alone", "vq")
NULL, VQ = "ar_null", "vq_roundtrip"
DRAFTER_ALONE = "drafter_alone"            # + "_<upsampler>"; the blindness test reads the pixel one
UPSAMPLERS = ("pixel", "nearest", "embedding", "learned")


def control_rows(upsamplers=UPSAMPLERS) -> dict[str, tuple[Control, str | None]]:
    """Every benchmark run's control rows, named as the tables show them."""
    rows: dict[str, tuple[Control, str | None]] = {NULL: (Control("null"), None)}
    rows.update({f"{DRAFTER_ALONE}_{u}": (Control("drafter_alone", u), "low") for u in upsamplers})
    rows[VQ] = (Control("vq"), None)
    return rows


def is_control(config) -> bool:
    return isinstance(config, Control)


def run_control(models: Models, ctl: Control, cond: torch.Tensor, seed: int, sampling: SamplingConfig) -> GenerationResult:
    """One batch of a control row, as a GenerationResult of the target's grid."""
    target = models.target
    t0 = time.perf_counter()
    if ctl.kind == "null":
        return generate(target, cond, sampling, MethodConfig(method="ar"), seed=seed + NULL_SEED)
    stats = RunStats(method="control", batch=len(cond), tokens=target.num_tokens)
    with torch.inference_mode():
        if ctl.kind == "drafter_alone":
            drafter = models.drafter
            low = generate_ar(drafter, cond, sampling, seed, decode=False)
            stats.drafter_calls = low.stats.target_calls
            with stats.timer("upsample"):
                tokens = upsample_rows(UpsamplerConfig(kind=ctl.upsampler), drafter, target, low.tokens, drafter.grid)
        else:
            fam = models.family
            real = fam.batch(cond.tolist(), VQ_SEED + seed, size=target.image_size, variation=fam.gpt_variation)
            tokens = target.encode(real.to(target.device))
        with stats.timer("decode"):
            images = target.decode(tokens)
    stats.seconds["total"] = time.perf_counter() - t0
    return GenerationResult(tokens, images, stats)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _maxrss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)


def _time_split(seconds: dict, total: float) -> dict:
    """The decoding timers (one vocabulary for every method, decode.context) -> TIME_PARTS, the rest "other"."""
    out = {p: float(seconds.get(p, 0.0)) for p in TIME_PARTS if p != "other"}
    out["other"] = max(total - sum(out.values()), 0.0)
    return out


def call_costs(rec: dict) -> dict:
    """Milliseconds per call kind, from the engine's timers over all runs of a method: AR's target token,
    a verify call (per step), a resampling wave (recheck waves included), a drafter call, an upsampling
    (per step). None where the method makes no such call."""
    total = lambda part: sum(s.get(part, 0.0) for s in rec["seconds"])
    steps, waves, dcalls = sum(rec["steps"]), sum(rec["waves"]), sum(rec["drafter_calls"])
    per = lambda secs, n: 1000 * secs / n if n and secs else None   # no such call: None
    stepless = steps == 0   # AR and ZipAR: every target call samples (one token, one token per row)
    return {"target_token": per(total("verify"), sum(rec["target_calls"])) if stepless else None,
            "verify_call": per(total("verify"), steps), "resample_wave": per(total("resample"), waves),
            "drafter_call": per(total("draft"), dcalls), "upsample_step": per(total("upsample"), steps),
            "waves_per_step": waves / steps if steps else None}


def resume_key(methods: dict, samples: int, batch: int, sampling: SamplingConfig) -> str:
    """What a saved run must share with this one to be continued: methods, their settings, samples, batch."""
    return repr(([(n, repr(c)) for n, c in methods.items()], samples, batch, repr(sampling)))


def save_records(path: str, key: str, raw: dict, done: int) -> None:
    """The records after `done` batches, readable with weights_only=True (features as tensors)."""
    portable = {n: {**r, "features": [torch.from_numpy(f) for f in r["features"]]} for n, r in raw.items()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"key": key, "done": done, "raw": portable}, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_records(path: str, key: str) -> tuple[dict, int] | None:
    """(records, batches done) saved by the same settings, else None (and a saved run of others is named)."""
    if not os.path.isfile(path):
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state["key"] != key:
        log.warning("%s holds a run of other settings; starting over (it is replaced)", path)
        return None
    raw = {n: {**r, "features": [f.numpy() for f in r["features"]]} for n, r in state["raw"].items()}
    return raw, int(state["done"])


def run_methods(models: Models, methods: dict[str, tuple[MethodConfig, str | None]], samples: int,
                batch: int = 1, warmup: int = 1, sampling: SamplingConfig | None = None, keep_images: int = 0,
                progress: bool = True, label: str = "bench", resume: str | None = None) -> dict[str, dict]:
    """Run every method on the same batches, interleaved; returns raw per-run records per method
    (with the target's own sampling unless `sampling` says otherwise). With `resume` (a file), the records
    are saved there every RESUME_EVERY_S seconds and a run of the same settings continues after its last
    saved batch: every batch still runs every method side by side, the warm-up runs again, and each
    record's "resumed_at" lists the batches a run continued from."""
    target, dev = models.target, models.target.device
    sampling = sampling or models.sampling
    names = list(methods)
    batches = [(i, min(batch, samples - i)) for i in range(0, samples, batch)]
    key = resume_key(methods, samples, batch, sampling)
    saved = load_records(resume, key) if resume else None
    raw, done = saved or ({n: {"wall": [], "target_calls": [], "drafter_calls": [], "tokens_per_image": [], "batch": [],
                               "steps": [], "waves": [], "seconds": [],
                               "accepted": 0, "resampled": 0, "drafted": 0, "tokens_total": 0, "split": [], "mem": 0,
                               "correct": [], "features": [], "nll": [], "images": [], "maps": [],
                               "tokens_in_range": True, "all_images": [], "all_tokens": [], "classes": [],
                               "resumed_at": []}
                           for n in names}, 0)
    if saved:
        log.info("%s: continuing after batch %d of %d", resume, done, len(batches))
        for n in names:
            raw[n]["resumed_at"].append(done)
    bar = TextBar(warmup * len(names) + (len(batches) - done) * len(names), progress, label)
    def run(cfg, kind, cond, seed):
        if is_control(cfg):
            return run_control(models, cfg, cond, seed, sampling)
        return generate(target, cond, sampling, cfg, models.drafter_for(kind), seed=seed)

    for n in names:                                   # warm-up (allocator, kernels, rope tables, kNN tables)
        cfg, kind = methods[n]
        raw[n]["weights"] = weight_bytes(target, models.drafter_for(kind))   # a self-drafter adds nothing
        for k in range(warmup):
            run(cfg, kind, torch.tensor([0] * batch), WARMUP_SEED + k)
            bar.step(f"warm-up {n}")
    last_save = time.perf_counter()
    for bi, (i0, b) in enumerate(batches):
        if bi < done:
            continue
        if resume and time.perf_counter() - last_save > RESUME_EVERY_S:
            save_records(resume, key, raw, bi)
            last_save = time.perf_counter()
        cond = torch.tensor([(i0 + j) % models.family.num_classes for j in range(b)])
        order = names[bi % len(names):] + names[:bi % len(names)]
        for n in order:
            cfg, kind = methods[n]
            rec = raw[n]
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            rss0 = _maxrss_bytes()
            _sync(dev)
            t0 = time.perf_counter()
            res = run(cfg, kind, cond, i0)
            _sync(dev)
            wall = time.perf_counter() - t0
            rec["mem"] = max(rec["mem"], int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda"
                             else _maxrss_bytes() - rss0)
            st = res.stats
            rec["wall"].append(wall / b)
            rec["batch"].append(b)
            rec["target_calls"].append(st.target_calls)
            rec["drafter_calls"].append(st.drafter_calls)
            rec["steps"].append(st.steps)
            rec["waves"].append(sum(st.waves))
            rec["seconds"].append(dict(st.seconds))
            rec["tokens_per_image"].append(int(res.tokens.shape[1]))
            rec["tokens_in_range"] &= bool(((res.tokens >= 0) & (res.tokens < target.vocab_size)).all())
            rec["accepted"] += st.accepted
            rec["resampled"] += st.resampled
            rec["drafted"] += st.drafted
            rec["tokens_total"] += int(res.tokens.numel())
            rec["split"].append({k: v / b for k, v in _time_split(st.seconds, wall).items()})
            with torch.inference_mode():                 # quality, outside the timed region
                imgs = res.images.float().to(next(models.classifier.parameters()).device)
                feats = models.classifier.features(imgs)
                logits = models.classifier.head(feats)
            rec["correct"].extend((logits.argmax(-1).cpu() == cond).tolist())
            rec["features"].append(feats.float().cpu().numpy())
            rec["nll"].extend(target_nll(target, res.tokens, cond, sampling).tolist())
            rec["all_images"].append(to_uint8(res.images))   # the quality measures' sets (bench.measures)
            rec["all_tokens"].append(res.tokens.to(torch.int16).cpu())
            rec["classes"].extend(cond.tolist())
            if len(rec["images"]) < keep_images:
                rec["images"].append(res.images.float().cpu())
                if res.maps is not None:
                    rec["maps"].append(res.maps.float().cpu())
            bar.step(f"{n} sample {i0}")
    return raw
