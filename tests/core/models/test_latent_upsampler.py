"""The learned upsampler network (models/latent_upsampler.py): row-causal, saved and loaded
through safetensors with its codebook fingerprint, refused with named errors otherwise."""
from __future__ import annotations

import os

import pytest
import torch

from mulosd_core.models.checkpoints import CheckpointError, save_safetensors
from mulosd_core.models.latent_upsampler import (LatentUpsampler, LatentUpsamplerConfig, cached_latent_upsampler,
                                                 load_latent_upsampler, save_latent_upsampler)


def _net(seed: int = 0, **kw) -> LatentUpsampler:
    torch.manual_seed(seed)
    return LatentUpsampler(LatentUpsamplerConfig(**{"codebook_size": 32, "channels": 8, "layers": 2, **kw})).eval()


@pytest.mark.parametrize("ratio", [2, 4])
def test_output_rows_see_only_their_low_row_and_those_above(ratio):
    net = _net(ratio=ratio)
    g = 4
    x = torch.randint(0, 32, (2, g * g), generator=torch.Generator().manual_seed(1))
    logits = net(x, g, g)
    assert logits.shape == (2, g * g * ratio * ratio, 32)
    for row in range(g):
        y = x.clone()
        y[:, (row + 1) * g:] = (y[:, (row + 1) * g:] + 1) % 32          # change every row below `row`
        upto = (row + 1) * ratio * g * ratio                              # target tokens under rows 0..row
        changed = net(y, g, g)
        assert torch.allclose(changed[:, :upto], logits[:, :upto], atol=1e-6)
        if row + 1 < g:
            assert not torch.allclose(changed[:, upto:], logits[:, upto:])
    # a band of the first rows gives the same answer as the whole grid (what the engine passes)
    assert torch.allclose(net(x[:, :2 * g], 2, g), logits[:, :2 * ratio * g * ratio], atol=1e-6)


def test_save_load_round_trip_keeps_config_and_codebook(tmp_path):
    net = _net()
    net.codebook_id = "abc123"
    path = str(tmp_path / "up.safetensors")
    save_latent_upsampler(net, path)
    back = load_latent_upsampler(path)
    assert back.config == net.config and back.codebook_id == "abc123"
    x = torch.randint(0, 32, (3, 16))
    # stored in float16: logits close, tokens the same where the margin is not tiny
    assert torch.allclose(back(x, 4, 4), net(x, 4, 4), atol=5e-2)


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no learned upsampler there"):
        load_latent_upsampler(str(tmp_path / "missing.safetensors"))
    other = str(tmp_path / "gpt.safetensors")
    save_safetensors({"w": torch.zeros(2)}, other, {"kind": "gpt"})
    with pytest.raises(CheckpointError, match="not a learned upsampler"):
        load_latent_upsampler(other)


def test_cache_reloads_a_replaced_file(tmp_path):
    path = str(tmp_path / "up.safetensors")
    save_latent_upsampler(_net(0), path)
    a = cached_latent_upsampler(path, torch.device("cpu"))
    assert cached_latent_upsampler(path, torch.device("cpu")) is a
    save_latent_upsampler(_net(1, channels=16), path)
    os.utime(path, ns=(a.embed.weight.numel(), 10 ** 18))   # make sure the stamp differs
    b = cached_latent_upsampler(path, torch.device("cpu"))
    assert b is not a and b.config.channels == 16
