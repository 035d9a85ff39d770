"""Decoding (docs/DESIGN.md sections 2 and 4): every method over one run context, every acceptance rule
one table entry.

    generate(target, cond, sampling=None, method=..., drafter=None, seed=0)

- config.py:      VerifierConfig, MethodConfig (plain data, checked against the tables when built)
- rules.py:       RULES, the acceptance rules (mulo, lantern, exact, greedy, gsd, grouped, pool_greedy)
- methods.py:     METHODS, the methods: ar.py, speculative.py (SD, LANTERN, MuLo-SD), zipar.py, sjd.py (SJD, GSD)
- context.py:     the run context, a model's call bookkeeping, the method interface, the result, map codes
- engine.py:      checks, the memory estimate, caches and cancelling around one method's run

The shipped settings of a model pair are not decided here: presets.resolve decides them.
"""
from __future__ import annotations

from .config import COMMITS, RECHECK_SCOPES, REJECTIONS, RESAMPLINGS, WAVE_FEEDS, MethodConfig, VerifierConfig
from .context import (ACCEPTED, MAP_COLOURS, NEIGHBOUR, REJECTED, TARGET, GenerationResult, Progress, acceptance_map,
                      map_codes)
from .engine import call_sizes, check_pair, check_run, generate, model_sampling
from .methods import METHODS
from .rules import RULES, Rule


def generate_ar(model, cond, sampling=None, seed: int = 0, **kw) -> GenerationResult:
    """The AR reference: `generate` with the "ar" method (one target call per token)."""
    return generate(model, cond, sampling, "ar", seed=seed, **kw)

