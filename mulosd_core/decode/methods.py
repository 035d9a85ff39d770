"""The method table: every decoding method by name (decode.context.Method)."""
from __future__ import annotations

from . import ar, sjd, speculative, zipar
from .context import Method

METHODS: dict[str, Method] = {m.name: m for m in (ar.METHOD, speculative.METHOD, zipar.METHOD, sjd.METHOD)}
