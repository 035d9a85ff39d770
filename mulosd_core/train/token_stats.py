"""Token statistics of an embedded family: is its target like a real AR image model?

Relaxed acceptance only pays off when the target spreads its mass over many visually
equivalent tokens. These functions measure that on the target's own samples, teacher-forced
(one forward pass over a finished grid): the raw next-token distribution (softmax of the
conditional logits at temperature 1, no CFG, no top-k), how much of an image can be swapped
for other likely tokens without changing what the classifier sees, and how often a perfect
low-resolution draft would be accepted given the true prefix.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..imageops import resize
from ..neighbours import cached_knn_table
from ..sampling import SamplingConfig, cfg_combine, process_logits
from ..upsample import UpsamplerConfig, upsample_rows
from ..verify import mulo_pooled


@torch.no_grad()
def raw_next_token_probs(model, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B, N, V]: softmax of the conditional logits at every position of finished grids."""
    return model.gpt(tokens.to(model.device), labels.to(model.device), model.grid).float().softmax(-1)


def distribution_figures(probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per position [B, N]: top-1 probability and perplexity exp(entropy) of next-token distributions."""
    top1 = probs.amax(-1)
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
    return {"top1": top1, "perplexity": entropy.exp()}


@torch.no_grad()
def swap_tokens(probs: torch.Tensor, tokens: torch.Tensor, share: float, top: int, generator: torch.Generator) -> torch.Tensor:
    """Replace a random `share` of each grid's tokens by draws from the target's top-`top` at that position
    (renormalised raw distribution, teacher-forced on the original grid)."""
    b, n, _ = probs.shape
    pick = torch.rand(b, n, generator=generator) < share
    vals, idx = probs.cpu().topk(top, dim=-1)
    choice = torch.multinomial(vals.reshape(b * n, top), 1, generator=generator).reshape(b, n)
    drawn = idx.gather(-1, choice[..., None])[..., 0]
    return torch.where(pick, drawn, tokens.cpu())


@torch.no_grad()
def low_encoding(target, drafter, tokens: torch.Tensor) -> torch.Tensor:
    """The drafter-grid tokens of the target's grids: decoded, resized down by r and coded by the drafter's
    tokenizer (how the training pool pairs low and full tokens of one image)."""
    images = target.decode(tokens)
    return drafter.encode(resize(images, images.shape[-1] // (target.grid // drafter.grid), "area"))


@torch.no_grad()
def sampling_probs(target, tokens: torch.Tensor, labels: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """[B, N, V]: the distribution the target samples from at every position given the true tokens before
    it (`sampling`, CFG included), in one teacher-forced pass."""
    logits = target.gpt(tokens.to(target.device), labels.to(target.device), target.grid)
    if sampling.uses_cfg:
        null = target.gpt(tokens.to(target.device), target.gpt.null_condition(len(labels), target.device), target.grid)
        logits = cfg_combine(torch.cat([logits, null]), sampling.cfg_scale)
    return process_logits(logits, sampling).float()


@torch.no_grad()
def prefix_acceptance(target, drafter, tokens: torch.Tensor, labels: torch.Tensor, sampling: SamplingConfig,
                      taus: tuple[float, ...] = (0.05, 0.3), ks: tuple[int, ...] = (1, 4, 16)) -> dict[str, float]:
    """Share of perfect drafts MuLo-SD's rule accepts given the true prefix.

    The drafts are the target's own samples seen at the drafter's resolution (`low_encoding`) lifted back
    by the pixel route. Each draft token is judged against the target's sampling distribution given the
    true tokens before it, pooled over its k nearest codes, for every tau and k.
    """
    low = low_encoding(target, drafter, tokens)
    drafts = upsample_rows(UpsamplerConfig(kind="pixel"), drafter, target, low, drafter.grid)
    probs = sampling_probs(target, tokens, labels, sampling)
    out = {"draft_equals_sample": float((drafts.cpu() == tokens.cpu()).float().mean())}
    for k in ks:
        nbr = cached_knn_table(target.codebook(), min(k, target.vocab_size), include_self=True)
        pooled = mulo_pooled(probs, drafts.to(probs.device), nbr.to(probs.device))
        for tau in taus:
            out[f"tau{tau:g}_k{k}"] = float((pooled >= tau).float().mean())
    return out


@torch.no_grad()
def exact_ceiling(target, drafter, net, tokens: torch.Tensor, labels: torch.Tensor,
                  sampling: SamplingConfig) -> dict[str, torch.Tensor]:
    """Per image [B]: what the exact test can accept from a learned upsampler `net`, teacher-forced.

    A draft drawn from the upsampler's q is accepted with probability sum_v min(p, q) = 1 - TV(p, q)
    (docs/DESIGN.md section 3.7): p the target's sampling distribution given the true prefix, q the
    upsampler's softmax given the image's low-res encoding (row-causal, as a drafting step sees it). Also
    the probability p gives the upsampler's argmax (the deterministic draft). Both are the rate of a
    position whose earlier drafts were all accepted: the engine's own drafts come from the drafter's
    samples, not from the image's encoding, so it sees less.
    """
    low = low_encoding(target, drafter, tokens)
    g = drafter.grid
    dev = next(net.parameters()).device
    q = torch.softmax(net(low.to(dev), g, g).float(), -1).to(target.device)
    p = sampling_probs(target, tokens, labels, sampling)
    return {"one_minus_tv": torch.minimum(p, q).sum(-1).mean(-1).cpu(),
            "p_of_argmax": p.gather(-1, q.argmax(-1, keepdim=True))[..., 0].mean(-1).cpu()}


def half_size(images: torch.Tensor) -> torch.Tensor:
    """Images resized to half size and back (what survives at the drafter's resolution)."""
    s = images.shape[-1]
    return F.interpolate(resize(images, s // 2, "area"), size=(s, s), mode="bilinear", align_corners=False)
