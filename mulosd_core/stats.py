"""Run statistics: counters and timings that every method reports, JSON-serialisable."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, asdict


@dataclass
class RunStats:
    method: str = "ar"
    batch: int = 1
    tokens: int = 0                 # image tokens produced per sample
    target_calls: int = 0           # target forwards, prefill included
    drafter_calls: int = 0          # drafter forwards, prefills included
    drafted: int = 0                # draft tokens proposed to the verifier
    accepted: int = 0               # draft tokens kept as drafted
    resampled: int = 0              # tokens sampled by the target outside acceptance
    rechecked: int = 0              # tokens resampled because they failed a VerifierConfig.recheck round
    recheck_rounds: int = 0         # recheck rounds that found a failure (each costs target calls)
    recheck_exhausted: int = 0      # steps that spent every recheck round: the last one still resampled, so
                                    # tokens it made stale were not verified again
    steps: int = 0                  # decoding steps (chunks)
    waves: list[int] = field(default_factory=list)   # per step: resampling waves (the depth of its largest island),
                                                     # recheck rounds' waves added
    seconds: dict[str, float] = field(default_factory=lambda: {"total": 0.0})
    peak_memory_bytes: int = 0      # CUDA: peak allocated during the run, summed over the GPUs it used; 0 on CPU
    peak_memory_by_device: dict[str, int] = field(default_factory=dict)   # the same per CUDA device
    cache_bytes: int = 0            # KV caches the run allocated, all models, any device (what a run adds to weights)

    @contextmanager
    def timer(self, part: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - t0

    @property
    def tokens_per_target_call(self) -> float:
        return self.tokens / max(self.target_calls, 1)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / max(self.drafted, 1)

    @property
    def resampled_fraction(self) -> float:
        return self.resampled / max(self.tokens * self.batch, 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(tokens_per_target_call=self.tokens_per_target_call, acceptance_rate=self.acceptance_rate,
                 resampled_fraction=self.resampled_fraction)
        return d
