"""Acceptance rules: one table entry each (docs/DESIGN.md sections 2.3, 5.2-5.6).

A rule says whether a draft the verifying call scored is kept. Everything the decoding methods and the
Local Verifier need to know about a rule is in its `Rule` entry, so adding a rule is one entry here (and
its test): the methods, the config checks and the node read the table and compare no rule names.

Test signature: test(tables, verifier, probs [B, n, V], draft [B, n], q [B, n, V] or None, u [B, n] or None)
-> (accepted Bool [B, n], aux or None). `q` and `u` (the drafter's distributions and acceptance uniforms)
are given only to rules with needs_q; `aux` is what the rule's residual needs back (LANTERN: whether each
draft's pool used neighbours). Residual signature: residual(tables, verifier, p [V], q [V] or None, draft
(scalar tensor), aux or None) -> the distribution a rejected position is resampled from under raster
rejection (local rejection resamples from the target's p).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from .. import verify
from ..neighbours import cached_knn_table


@dataclass
class Tables:
    """What a rule precomputes from the target's codebook once per run."""
    neighbours: Optional[Tensor] = None     # [V, k]: the draft's pool (mulo, pool_greedy) or LANTERN's A_k
    lantern_k: int = 0
    unit_codebook: Optional[Tensor] = None  # l2-normalised codes, GSD's distance gate (verify.gsd_group)


@dataclass(frozen=True)
class Rule:
    name: str
    description: str                  # one line: the Local Verifier's tooltip reads it
    needs_q: bool                     # needs the drafter's probability of each draft (a same-resolution drafter)
    repeatable: bool                  # deterministic: a recheck round (VerifierConfig.recheck) can repeat it
    test: Callable[..., tuple[Tensor, Any]]
    prepare: Callable[[Any, Any], Tables] = lambda verifier, target: Tables()
    residual: Callable[..., Tensor] = lambda tables, verifier, p, q, draft, aux: p
    pool: bool = False                # has a neighbour pool an accepted position can draw from (commit "pool")
    sjd_label: Optional[str] = None   # SJD can run it (a p/q test); the name its runs report. None: SJD uses exact


def _knn(verifier, target) -> Tables:
    k = min(verifier.k_neighbours, target.vocab_size)
    return Tables(neighbours=cached_knn_table(target.codebook(), k, include_self=True))


def _lantern_tables(verifier, target) -> Tables:
    k = verify.lantern_neighbours(target.vocab_size, verifier.lantern_k)
    return Tables(neighbours=cached_knn_table(target.raw_codebook(), min(k + 1, target.vocab_size - 1), include_self=False),
                  lantern_k=k)


def _unit(verifier, target) -> Tables:
    return Tables(unit_codebook=torch.nn.functional.normalize(target.codebook().detach().float(), p=2, dim=-1))


def _at(dist: Tensor, draft: Tensor) -> Tensor:
    return dist.gather(-1, draft[..., None])[..., 0]


def _exact(t, v, probs, draft, q, u):
    return verify.exact_accept(_at(probs, draft), _at(q, draft), u), None


def _lantern(t, v, probs, draft, q, u):
    pooled, used = verify.lantern_pool(probs, draft, t.neighbours, t.lantern_k, v.lantern_delta)
    return verify.lantern_test(pooled, _at(q, draft), u), used


def _gsd(t, v, probs, draft, q, u):
    return verify.gsd_accept(probs, q, draft, t.unit_codebook, u, v.gsd_rank_window, v.gsd_p_thr, v.gsd_d_thr), None


def _pq_residual(t, v, p, q, draft, aux):
    return verify.residual(p, q)


def _pool_greedy(t, v, probs, draft, q, u):
    """Accept iff the target's most probable code lies in the draft's pool of k nearest codes."""
    return (t.neighbours.long()[draft] == probs.argmax(-1)[..., None]).any(-1), None


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("mulo", "MuLo-SD: the target's probability mass over the draft's k nearest codes reaches tau",
         needs_q=False, repeatable=True, pool=True, prepare=_knn,
         test=lambda t, v, probs, draft, q, u: (verify.mulo_accept(probs, draft, t.neighbours, v.tau), None)),
    Rule("lantern", "LANTERN: p/q test with the draft's probability raised by nearby codes' mass (at most delta)",
         needs_q=True, repeatable=False, prepare=_lantern_tables, test=_lantern,
         residual=lambda t, v, p, q, draft, used: verify.lantern_reject_update(p, draft, t.neighbours, t.lantern_k, used)),
    Rule("exact", "speculative sampling: accept with probability min(1, p/q), resample from the residual",
         needs_q=True, repeatable=False, test=_exact, residual=_pq_residual, sjd_label="sjd"),
    Rule("greedy", "the draft is the target's most probable code (the greedy exactness anchor)",
         needs_q=False, repeatable=True, test=lambda t, v, probs, draft, q, u: (verify.greedy_accept(probs, draft), None)),
    Rule("gsd", "GSD: p/q test summed over the draft's group of similarly ranked, nearby codes",
         needs_q=True, repeatable=False, prepare=_unit, test=_gsd, residual=_pq_residual, sjd_label="gsd"),
    Rule("grouped", "MuLo-SD's test over GSD's group: the group's target mass reaches tau",
         needs_q=False, repeatable=True, prepare=_unit,
         test=lambda t, v, probs, draft, q, u: (verify.grouped_accept(probs, draft, t.unit_codebook, v.tau, v.gsd_rank_window,
                                                                     v.gsd_p_thr, v.gsd_d_thr), None)),
    Rule("pool_greedy", "the target's most probable code is one of the draft's k nearest codes",
         needs_q=False, repeatable=True, prepare=_knn, test=_pool_greedy),
)}


def rule_names(where: Callable[[Rule], bool] = lambda r: True) -> list[str]:
    """The rules with a property, in table order (for error messages and the node's choices)."""
    return [n for n, r in RULES.items() if where(r)]
