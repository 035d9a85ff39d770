"""Put the repository root on sys.path so tests import mulosd_core without installing it.

The suite runs torch on one thread: the tiny models gain nothing from more, and on a
2-core machine that also runs a ComfyUI server, extra OpenMP threads thrash.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # packaging tests can run without torch
    pass
