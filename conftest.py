"""Put the repository root on sys.path so tests import mulosd_core without installing it."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
