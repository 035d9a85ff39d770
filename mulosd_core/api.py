"""The library's public names: what the nodes, the benchmark and a user's script import (one module).

Everything here is stable; modules not re-exported here are the library's internals.
"""
from __future__ import annotations

# -- decoding: the configs, the tables, generate, and the one place defaults are decided
from .decode import (COMMITS, METHODS, RECHECK_SCOPES, REJECTIONS, RESAMPLINGS, RULES, GenerationResult, MethodConfig,
                     VerifierConfig, generate)
from .imageops import FILTERS
from .presets import (LANTERN_DELTA, LANTERN_K, QUALITIES, SHIPPED, SJD_WINDOW, TARGET_ONLY, ZIPAR_WINDOW, mulo_verifier,
                      resolve)
from .sampling import SamplingConfig
from .upsample import KINDS, UpsamplerConfig

# -- models: the protocol, loading by file, the families
from .models.checkpoints import CheckpointError
from .models.janus import DEFAULT_MAX_PROMPT_TOKENS, JanusModel, load_janus
from .models.llamagen import LlamaGenModel, self_drafter
from .models.protocol import ImageARModel
from .models.registry import (DTYPES, EMBEDDED_DIR, EMBEDDED_MEMBERS, check_file, load_embedded, load_model, load_vq,
                              stored_image_size)
from .models.text_encoder import T5CaptionEncoder, clean_caption

# -- where the weights live (the loaders' `weights` input)
from .offload import (DEFAULT_WEIGHT_MODE, WEIGHT_MODES, check_weight_mode, is_streamed, load_device, place_weights,
                      weights_report)
