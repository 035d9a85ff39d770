"""Cancel at every model call, not once per decoding step.

A decoding step of MuLo-SD can be the whole image (8 low-res rows per step on a 16x16 grid),
so a check per step lets a cancel wait for the whole run. Instead the engine hands its
helpers the models wrapped in `Interruptible`: every model call (target or drafter forward,
VQ encode or decode) first calls the caller's `check`, which raises to stop the run. A cancel
then waits at most for the model call in flight; the run's caches are released on the way
out as for any other failure (kv_cache.cache_scope).

The core knows nothing of ComfyUI: the nodes pass
`comfy.model_management.throw_exception_if_processing_interrupted` as `check`.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

# check(): returns when the run may go on, raises (any exception) to stop it.
Check = Callable[[], None]

# the ImageARModel methods that run a network (the rest read attributes, codebooks or caches)
MODEL_CALLS = frozenset({"prefill", "forward_tokens", "encode", "decode", "decode_rows"})


class Interruptible:
    """A model whose calls in MODEL_CALLS first call `check`; everything else passes through unchanged."""

    __slots__ = ("_model", "_check")

    def __init__(self, model: Any, check: Check) -> None:
        self._model = model
        self._check = check

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._model, name)
        if name not in MODEL_CALLS:
            return attr
        check = self._check

        def call(*args, **kwargs):
            check()
            return attr(*args, **kwargs)

        return call

    @property
    def unwrapped(self) -> Any:
        return self._model


def check_now(model: Any) -> None:
    """Call `model`'s check when it is Interruptible: before a network the model does not run itself
    (the learned upsampler)."""
    if isinstance(model, Interruptible):
        model._check()


def interruptible(model: Any, check: Optional[Check]) -> Any:
    """`model` wrapped so that each of its model calls first calls `check` (unchanged when either is None)."""
    if model is None or check is None:
        return model
    if isinstance(model, Interruptible):
        model = model.unwrapped
    return Interruptible(model, check)
