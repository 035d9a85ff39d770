"""generate: checks, memory, caches and cancelling around one method's run (decode.methods)."""
from __future__ import annotations

import time
from typing import Optional

import torch

from ..cancel import Check, interruptible
from ..conditions import check_condition
from ..memory import check_fits, out_of_memory_advice
from ..models.kv_cache import cache_scope
from ..models.protocol import ImageARModel
from ..sampling import SamplingConfig
from ..stats import RunStats
from ..upsample import learned_net, resolution_ratio
from .config import MethodConfig
from .context import GenerationResult, Progress, RunContext, acceptance_map
from .methods import METHODS
from .rules import RULES, rule_names


def model_sampling(model, sampling: Optional[SamplingConfig] = None) -> SamplingConfig:
    """`sampling` when given, else the sampling the model was trained for (`model.default_sampling`,
    which the loaders set from the model's card; mulosd_core.models.registry), else SamplingConfig()."""
    if sampling is not None:
        return sampling
    return getattr(model, "default_sampling", None) or SamplingConfig()


def check_pair(target: ImageARModel, drafter: ImageARModel, method: MethodConfig) -> int:
    """Validate a drafter/target pair before any model runs; returns the ratio r."""
    if drafter.codebook_id() != target.codebook_id():
        raise ValueError(f"drafter {drafter.name!r} and target {target.name!r} use different codebooks; "
                         "MuLo-SD needs both to share one VQ tokenizer")
    if drafter.model_type != target.model_type:
        raise ValueError(f"drafter {drafter.name!r} is {drafter.model_type} but target {target.name!r} "
                         f"is {target.model_type}; both must take the same conditioning")
    r = resolution_ratio(target.grid, drafter.grid)
    if method.upsampler.ratio is not None and method.upsampler.ratio != r:
        raise ValueError(f"upsampler ratio {method.upsampler.ratio} does not match the models: target grid {target.grid} / "
                         f"drafter grid {drafter.grid} = {r}")
    if r > 1 and RULES[method.verifier.rule].needs_q and not method.upsampler.draw:
        raise ValueError(f"acceptance rule {method.verifier.rule!r} needs the probability of each draft under the "
                         f"distribution it was drawn from, which a deterministic upsampled (r = {r}) draft does not "
                         f"have; draw the drafts from the learned upsampler (kind 'learned', draw=True), use one of "
                         f"{', '.join(repr(n) for n in rule_names(lambda x: not x.needs_q))}, or a same-resolution drafter")
    if r == 1 and method.parallel_window:
        raise ValueError("parallel drafting is for a low-resolution drafter (r > 1); set parallel_window = 0 for r = 1")
    if r > 1 and method.upsampler.kind == "learned":
        learned_net(method.upsampler, target, r)   # file, ratio and codebook checked before any model runs
    return r


def check_run(target: ImageARModel, cond, method: MethodConfig, drafter: Optional[ImageARModel] = None,
              mask: Optional[torch.Tensor] = None) -> int:
    """What generate checks before any model runs: the drafter/target pair against the method (check_pair)
    and the condition against both models (conditions.check_condition). Settings check themselves when
    their configs are built. Errors name the input: "drafter/target: ...", "class_id: ...", "prompt: ...".
    Returns the batch: how many images the condition asks for."""
    needs_drafter = METHODS[method.method].needs_drafter
    if needs_drafter:
        if drafter is None:
            raise ValueError(f"drafter: the {method.method} method (MuLo-SD) needs a drafter model; got none. "
                             "Pass drafter= (e.g. registry.load_embedded('drafter')), or sample with the target "
                             f"alone: one of {[n for n, m in METHODS.items() if not m.needs_drafter]}")
        try:
            check_pair(target, drafter, method)
        except ValueError as e:
            raise ValueError(f"drafter/target: {e}") from None
    batch = check_condition(target, cond, mask, "target")
    if needs_drafter:
        check_condition(drafter, cond, mask, "drafter")
    return batch


def call_sizes(method: MethodConfig, target: ImageARModel, drafter: Optional[ImageARModel] = None) -> tuple[int, int]:
    """The most positions one target call and one drafter call of this method compute (for the memory
    estimate before a run): AR one token, ZipAR one per row, SJD its window, a speculative step its chunk."""
    return METHODS[method.method].call_sizes(method, target, drafter)


def generate(target: ImageARModel, cond, sampling: Optional[SamplingConfig] = None,
             method: MethodConfig | str | None = None,
             drafter: Optional[ImageARModel] = None, seed: int = 0, mask: Optional[torch.Tensor] = None,
             progress: Optional[Progress] = None, decode: bool = True,
             interrupt: Optional[Check] = None) -> GenerationResult:
    """Run one method on a batch of conditions; returns tokens, images, statistics and acceptance maps.

    `cond`: class ids (a list, a tensor [B] or one int) for c2i, caption features for t2i, prompts for
    Janus-Pro. `sampling=None` samples as the target was trained to (its card; model_sampling). `method`:
    a complete MethodConfig (presets.resolve gives the shipped MuLo-SD settings of a pair) or a method
    name ("ar", "zipar", "sjd", "speculative": that method at its config's defaults).

    Before anything runs, the memory the run needs is checked against what is free; every KV
    cache of the run is released when it ends, also when it fails or is cancelled, and an
    out-of-memory error becomes a NotEnoughMemory naming the model and what to lower.
    `interrupt()` is called before every model call (target, drafter, VQ encode/decode) and raises
    to cancel the run (mulosd_core.cancel); `progress` is called after every decoding step.
    """
    sampling = model_sampling(target, sampling)
    if isinstance(method, str):
        method = MethodConfig(method=method)
    elif not isinstance(method, MethodConfig):
        raise TypeError(f"method: expected a MethodConfig or a method name {tuple(METHODS)}, got "
                        f"{type(method).__name__}; presets.resolve(target, drafter) gives the shipped MuLo-SD settings")
    batch = check_run(target, cond, method, drafter, mask)
    used_drafter = drafter if METHODS[method.method].needs_drafter else None
    target_chunk, drafter_chunk = call_sizes(method, target, used_drafter)
    check_fits(batch, sampling.uses_cfg, target, used_drafter, target_chunk=target_chunk, drafter_chunk=drafter_chunk)
    gpus = sorted({m.device for m in (target, used_drafter) if m is not None and m.device.type == "cuda"}, key=str)
    for dev in gpus:
        torch.cuda.reset_peak_memory_stats(dev)
    with cache_scope() as caches, out_of_memory_advice(target, batch, used_drafter):
        res = _run(interruptible(target, interrupt), cond, sampling, method,
                   interruptible(used_drafter, interrupt), seed, mask, progress, decode)
        res.stats.cache_bytes = sum(c.allocated_bytes for c in caches)
    res.stats.peak_memory_by_device = {str(dev): int(torch.cuda.max_memory_allocated(dev)) for dev in gpus}
    res.stats.peak_memory_bytes = sum(res.stats.peak_memory_by_device.values())
    return res


def _run(target, cond, sampling, method, drafter, seed, mask, progress, decode) -> GenerationResult:
    t0 = time.perf_counter()
    m = METHODS[method.method]
    stats = RunStats(method=m.label(method), tokens=target.num_tokens)
    with torch.inference_mode():
        ctx = RunContext(target, drafter, cond, sampling, method, seed, mask, stats, progress)
        tokens, codes = m.run(ctx)
        stats.batch = tokens.shape[0]
        images = None
        if decode:
            with stats.timer("decode"):
                images = target.decode(tokens)
    stats.seconds["total"] = time.perf_counter() - t0
    return GenerationResult(tokens, images, stats, acceptance_map(codes, target.grid))
