"""A progress bar on stderr for long runs in a shell: the demo (one per method) and the benchmark.

On a terminal it redraws one line, `[mulo_islands] [########--------] 8/12 beach elapsed 1s eta 0s`; into a
file or pipe it writes a line every twentieth of the run (and at the end), so logs stay short. ComfyUI has
its own bar (nodes/progress.py); this one is for scripts.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 20   # characters of the bar itself


class TextBar:
    def __init__(self, total: int, enabled: bool = True, label: str = "bench", stream: TextIO | None = None) -> None:
        self.total, self.done, self.enabled, self.label = total, 0, enabled, label
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.tty = self.stream.isatty()
        self.every = max(1, total // 20)

    def line(self, what: str) -> str:
        el = time.perf_counter() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0.0
        filled = WIDTH * self.done // self.total if self.total else WIDTH
        bar = "#" * filled + "-" * (WIDTH - filled)
        return f"[{self.label}] [{bar}] {self.done}/{self.total} {what} elapsed {el:.0f}s eta {eta:.0f}s"

    def step(self, what: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        line = self.line(what)
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
            if self.done == self.total:
                self.stream.write("\n")
        elif self.done % self.every == 0 or self.done == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()
