"""LlamaGen VQ tokenizer port: official key names/shapes (VQ-16, VQ-8), encode/decode shapes at
4x/8x/16x, codebook lookup and the l2-normalised nearest-code search."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from mulosd_core.models.llamagen_vq import VQConfig, VQModel, vq_preset
from mulosd_core.models.registry import infer_vq_config
from mulosd_core.testing import randomize_, tiny_vq, tiny_vq_config
from official_keys import sections


def _meta_vq(name: str) -> VQModel:
    with torch.device("meta"):
        return VQModel(vq_preset(name, codebook_size=16384, codebook_embed_dim=8))


def _shapes(model: torch.nn.Module) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _vq8_from_vq16(keys16: dict[str, tuple]) -> dict[str, tuple]:
    """VQ-8 ([1,2,2,4]) is VQ-16 ([1,1,2,2,4]) without its first encoder level and its last decoder
    level: encoder level l+1 of VQ-16 has exactly the channels of VQ-8's level l, decoder levels 0..3
    coincide, except that VQ-8's last level (3) has no upsampling."""
    out = {}
    for k, shape in keys16.items():
        m = re.match(r"encoder\.conv_blocks\.(\d+)\.(.*)", k)
        if m:
            level = int(m.group(1))
            if level > 0:
                out[f"encoder.conv_blocks.{level - 1}.{m.group(2)}"] = shape
            continue
        m = re.match(r"decoder\.conv_blocks\.(\d+)\.(.*)", k)
        if m:
            level = int(m.group(1))
            if level < 4 and not (level == 3 and m.group(2).startswith("upsample.")):
                out[k] = shape
            continue
        out[k] = shape
    return out


def test_vq16_keys_shapes_and_params_are_official():
    want = sections()["VQ-16"]
    model = _meta_vq("VQ-16")
    got = _shapes(model)
    assert len(got) == want["count"] == 344
    assert got == want["keys"]
    assert sum(p.numel() for p in model.parameters()) == want["params"]  # the codebook_used buffer is not counted


def test_vq8_keys_and_shapes_follow_upstream_structure():
    want = _vq8_from_vq16(sections()["VQ-16"]["keys"])
    model = _meta_vq("VQ-8")
    assert model.downsample == 8
    assert _shapes(model) == want


@pytest.mark.parametrize("name,mult", [("VQ-16", [1, 1, 2, 2, 4]), ("VQ-8", [1, 2, 2, 4])])
def test_config_inferred_from_official_shapes(name, mult):
    sd = _meta_vq(name).state_dict()
    cfg = infer_vq_config(sd)
    assert cfg.encoder_ch_mult == mult and cfg.decoder_ch_mult == mult
    assert (cfg.codebook_size, cfg.codebook_embed_dim, cfg.ch, cfg.z_channels, cfg.num_res_blocks) == (16384, 8, 128, 256, 2)
    assert cfg.codebook_show_usage and cfg.codebook_l2_norm


@pytest.mark.parametrize("ds", [4, 8, 16])
def test_encode_decode_shapes(ds):
    vq = tiny_vq(seed=ds, codebook_size=32, downsample=ds)
    assert vq.downsample == ds
    side = 2 * ds
    img = torch.rand(2, 3, side, 3 * ds, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tok = vq.encode(img)
        assert tok.shape == (2, 2 * 3) and tok.dtype == torch.long
        assert int(tok.min()) >= 0 and int(tok.max()) < 32
        assert torch.equal(tok, vq.quantize.nearest(vq.encode_latent(img)).flatten(1))
        out = vq.decode(tok, 2, 3)
    assert out.shape == (2, 3, side, 3 * ds)
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    with pytest.raises(ValueError, match="multiple"):
        vq.encode(torch.rand(1, 3, side + 1, side))
    with pytest.raises(ValueError, match="tokens"):
        vq.decode(tok, 3, 3)


def test_nearest_of_codebook_vectors_returns_their_indices():
    vq = tiny_vq(seed=3, codebook_size=64)
    cb = vq.quantize.codebook()
    z = cb.t()[None, :, None, :]  # [1, C, 1, V]: one latent per code
    assert torch.equal(vq.quantize.nearest(z)[0, 0], torch.arange(64))
    # only the direction matters (l2-normalised search): scaled codes still find themselves
    assert torch.equal(vq.quantize.nearest(z * 7.5)[0, 0], torch.arange(64))
    assert torch.equal(vq.quantize.nearest(vq.quantize.embedding.weight.t()[None, :, None, :] * 0.01)[0, 0], torch.arange(64))


def test_lookup_is_raster_ordered_and_normalised():
    vq = tiny_vq(seed=4, codebook_size=64)
    w = vq.quantize.embedding.weight
    assert not torch.allclose(w.norm(dim=-1), torch.ones(64))  # stored codes are not unit norm
    tokens = torch.randint(0, 64, (2, 3 * 5), generator=torch.Generator().manual_seed(1))
    z = vq.quantize.lookup(tokens.reshape(2, 3, 5))
    assert z.shape == (2, 4, 3, 5)
    for r in range(3):
        for c in range(5):
            assert torch.allclose(z[:, :, r, c], F.normalize(w[tokens[:, r * 5 + c]], dim=-1))
    assert torch.allclose(z.norm(dim=1), torch.ones(2, 3, 5))


def test_nearest_matches_brute_force_cosine_search():
    vq = tiny_vq(seed=5, codebook_size=64)
    z = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(2))
    got = vq.quantize.nearest(z)
    e = F.normalize(vq.quantize.embedding.weight, dim=-1)
    zz = F.normalize(z.permute(0, 2, 3, 1), dim=-1)
    want = (zz @ e.t()).argmax(-1)  # argmin squared distance between unit vectors == argmax cosine
    assert torch.equal(got, want)


def test_without_l2_norm_the_raw_codebook_is_used():
    cfg = tiny_vq_config(codebook_size=16)
    cfg.codebook_l2_norm = False
    vq = randomize_(VQModel(cfg), 0).eval()
    w = vq.quantize.embedding.weight
    assert torch.equal(vq.quantize.codebook(), w)
    assert torch.equal(vq.quantize.nearest(w.t()[None, :, None, :])[0, 0], torch.arange(16))


def test_decode_uses_the_codebook_lookup():
    vq = tiny_vq(seed=6, codebook_size=64)
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = vq.decode(tokens, 4, 4)
        b = vq.decode_latent(vq.quantize.lookup(tokens.reshape(1, 4, 4))).clamp(0, 1)
    assert torch.equal(a, b)


def test_presets():
    assert vq_preset("VQ-16").downsample == 16 and vq_preset("VQ-8").downsample == 8
    assert isinstance(vq_preset("VQ-8"), VQConfig)
    with pytest.raises(ValueError):
        vq_preset("VQ-32")
