"""Training of the embedded model family (procedural data, CPU-sized)."""
