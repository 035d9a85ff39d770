"""Shared setup for the model tests.

- Lets the tests import the test-only upstream reference (reference_llamagen.py, official_keys.py).
- Runs each test with one intra-op thread: the models here are tiny, and on a small shared machine
  OpenMP's waits for a descheduled second thread make tiny convolutions ~50x slower.
"""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(autouse=True)
def _one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
