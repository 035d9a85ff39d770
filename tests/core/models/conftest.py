"""Shared setup for the model tests.

- Lets the tests import the test-only upstream reference (reference_llamagen.py, official_keys.py).
- Runs each test with one intra-op thread: the models here are tiny, and on a small shared machine
  OpenMP's waits for a descheduled second thread make tiny convolutions ~50x slower.
"""
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

