"""LlamaGen GPT port: logits parity with an upstream-behaviour reference, cache == full,
official sizes (FFN width, parameter counts) and official key names/shapes."""
from __future__ import annotations

import pytest
import torch

from mulosd_core.models.llamagen import LlamaGenModel
from mulosd_core.models.llamagen_gpt import GPT_SIZES, GPTConfig, LlamaGenGPT
from mulosd_core.models.registry import infer_gpt_config
from mulosd_core.models.rope import rope_table_2d
from mulosd_core.testing import tiny_gpt, tiny_vq
from official_keys import gpt_keys, sections
from reference_llamagen import ReferenceLlamaGen, complex_rope_table

TOL = 1e-4
GRID = 4
# (dim, n_head): head_dim 16 (two frequencies per axis) and head_dim 12 (three, an odd count like GPT-3B's 25)
SHAPES = [(32, 2), (48, 4)]


def _inputs(model_type: str, batch: int = 3, seed: int = 0, vocab: int = 64, cls_num: int = 7, cap_dim: int = 24):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, GRID * GRID), generator=g)
    if model_type == "c2i":
        return torch.randint(0, 10, (batch,), generator=g), tokens, None
    # left-padded captions as upstream lays them out: padding first, real tokens at the end, pad rows zero
    valid = torch.tensor([3, cls_num, 1, 5][:batch])
    mask = torch.arange(cls_num)[None, :] >= (cls_num - valid)[:, None]
    caps = torch.randn(batch, cls_num, cap_dim, generator=g) * mask[..., None]
    return caps, tokens, mask.long()


def _pair(model_type: str, dim: int, n_head: int, seed: int = 0):
    gpt = tiny_gpt(seed, model_type=model_type, dim=dim, n_head=n_head)
    ref = ReferenceLlamaGen({k: v.clone() for k, v in gpt.state_dict().items()}, n_head, GRID, gpt.cond_len)
    return gpt, ref


def _cached_logits(model: LlamaGenModel, cond, tokens, mask, chunk: int = 1) -> torch.Tensor:
    """Prefill, then teacher-force `tokens` `chunk` at a time through the static cache: [B, N, V]."""
    rows = model.condition_rows(cond, cfg=False, mask=mask)
    cache = model.new_cache(rows.rows)
    out = [model.prefill(rows, cache)[:, None]]
    n = tokens.shape[1]
    pos = torch.arange(n)
    for s in range(0, n - 1, chunk):
        e = min(s + chunk, n - 1)
        out.append(model.forward_tokens(tokens[:, s:e], pos[s:e], cache))
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("dim,n_head", SHAPES)
@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
def test_parity_with_upstream_reference(model_type, dim, n_head):
    gpt, ref = _pair(model_type, dim, n_head)
    cond, tokens, mask = _inputs(model_type)
    with torch.no_grad():
        want = ref.image_logits(cond, tokens, mask)
        want_inc = ref.decode_incremental(cond, tokens, mask)
        got_full = gpt(tokens, cond, GRID, cond_mask=mask)
        model = LlamaGenModel(gpt, tiny_vq(1), GRID * 4)
        got_cached = _cached_logits(model, cond, tokens, mask)
    assert want.shape == got_full.shape == got_cached.shape == (3, GRID * GRID, 64)
    assert got_full.dtype == got_cached.dtype == torch.float32
    # the reference's own two paths agree (sanity of the reference)
    assert (want - want_inc).abs().max().item() <= TOL
    d_full = (got_full - want).abs().max().item()
    d_cached = (got_cached - want).abs().max().item()
    d_cached_inc = (got_cached - want_inc).abs().max().item()
    print(f"parity {model_type} dim={dim} heads={n_head}: full {d_full:.2e} cached {d_cached:.2e} vs-ref-incremental {d_cached_inc:.2e}")
    assert d_full <= TOL and d_cached <= TOL and d_cached_inc <= TOL
    # the logits are far from trivially equal (random weights give spread-out logits)
    assert want.std().item() > 0.1


def test_t2i_padding_is_masked_not_ignored():
    """Changing the content of padded caption rows must not change anything when masked (upstream emb_masks)."""
    gpt, _ = _pair("t2i", 32, 2)
    cond, tokens, mask = _inputs("t2i")
    noisy = cond + torch.randn_like(cond) * (1 - mask[..., None].float())
    with torch.no_grad():
        a = gpt(tokens, cond, GRID, cond_mask=mask)
        b = gpt(tokens, noisy, GRID, cond_mask=mask)
        c = gpt(tokens, noisy, GRID)  # no mask: padded rows are attended
    assert (a - b).abs().max().item() <= 1e-5
    assert (a - c).abs().max().item() > 1e-3


@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_cached_incremental_equals_full_sequence(model_type, chunk):
    gpt, _ = _pair(model_type, 32, 2, seed=3)
    cond, tokens, mask = _inputs(model_type, seed=5)
    model = LlamaGenModel(gpt, tiny_vq(1), GRID * 4)
    with torch.no_grad():
        full = gpt(tokens, cond, GRID, cond_mask=mask)
        cached = _cached_logits(model, cond, tokens, mask, chunk=chunk)
    assert (full - cached).abs().max().item() <= 1e-5


def test_cfg_rows_match_reference_null_condition():
    """condition_rows(cfg=True) stacks [cond; null]: the null half is upstream's null class / stored null caption."""
    for model_type in ("c2i", "t2i"):
        gpt, ref = _pair(model_type, 32, 2, seed=7)
        cond, tokens, mask = _inputs(model_type, batch=2)
        model = LlamaGenModel(gpt, tiny_vq(1), GRID * 4)
        with torch.no_grad():
            rows = model.condition_rows(cond, cfg=True, mask=mask)
            cache = model.new_cache(rows.rows)
            got = model.prefill(rows, cache)
            null_mask = None if mask is None else torch.cat([mask, mask])
            want = ref.forward_full(torch.cat([cond, ref.null_cond(2)]), tokens[:, :0].repeat(2, 1), null_mask)[:, -1]
        assert got.shape == (4, 64)
        assert (got - want).abs().max().item() <= TOL


def test_condition_positions_get_zero_rotary_rows():
    table = rope_table_2d(grid=3, head_dim=16, cond_len=5)
    assert table.shape == (5 + 9, 8, 2)
    assert torch.count_nonzero(table[:5]) == 0  # zero, not the identity rotation
    # image token n = row*grid + col: the first half of the pairs rotate with the row, the second with the column
    n = 5 + 1 * 3 + 2  # row 1, col 2
    angle = torch.atan2(table[n, :, 1], table[n, :, 0])
    assert torch.allclose(angle[0], torch.tensor(1.0)) and torch.allclose(angle[4], torch.tensor(2.0))


@pytest.mark.parametrize("head_dim", [12, 16, 64, 100, 128])
def test_rope_table_matches_reference(head_dim):
    ours = rope_table_2d(5, head_dim, 3)
    ref = torch.view_as_real(complex_rope_table(5, head_dim, 3))
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() < 1e-5


def test_grid_from_image_size():
    vq = tiny_vq(1)  # 4x downsampling
    gpt = tiny_gpt(0)
    assert LlamaGenModel(gpt, vq, 16).grid == 4
    assert LlamaGenModel(gpt, vq, 24).num_tokens == 36
    with pytest.raises(ValueError, match="multiple"):
        LlamaGenModel(gpt, vq, 18)


# -- official sizes ----------------------------------------------------------------------------
# docs/DESIGN.md section 7.2: FFN hidden and parameter counts (c2i; t2i for XL), rounded as published
OFFICIAL = {
    "GPT-B": (64, 2048, 110.9e6, 0.1e6),
    "GPT-L": (64, 2816, 342.9e6, 0.1e6),
    "GPT-XL": (64, 3584, 774.7e6, 0.1e6),
    "GPT-XXL": (64, 4096, 1411.0e6, 0.1e6),
    "GPT-XXXL": (64, 6912, 3.89e9, 0.01e9),
    "GPT-1B": (64, 5632, 1.20e9, 0.01e9),
    "GPT-3B": (100, 8704, 3.10e9, 0.01e9),
    "GPT-7B": (128, 11008, 6.61e9, 0.01e9),
}


def _meta_gpt(size: str, model_type: str = "c2i") -> LlamaGenGPT:
    extra = dict(cls_token_num=120) if model_type == "t2i" else {}
    with torch.device("meta"):
        return LlamaGenGPT(GPTConfig.from_size(size, model_type=model_type, **extra))


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_size_table_is_complete():
    assert set(GPT_SIZES) == set(OFFICIAL)


@pytest.mark.parametrize("size", sorted(OFFICIAL))
def test_official_size_ffn_and_param_count(size):
    head_dim, hidden, params, unit = OFFICIAL[size]
    gpt = _meta_gpt(size)
    assert gpt.config.head_dim == head_dim
    assert gpt.config.ffn_hidden == hidden
    assert gpt.layers[0].feed_forward.w1.weight.shape[0] == hidden
    assert round(_params(gpt) / unit) == round(params / unit), f"{size}: {_params(gpt)} params"


def test_gpt_xl_t2i_param_count():
    gpt = _meta_gpt("GPT-XL", "t2i")
    assert round(_params(gpt) / 1e5) == 7777  # 777.7M
    assert gpt.cls_embedding.uncond_embedding.shape == (120, 2048)  # a buffer, not a parameter


@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
def test_gpt_b_keys_and_shapes_are_official(model_type):
    want = gpt_keys(f"GPT-B {model_type}", 12)
    assert len(want) == sections()[f"GPT-B {model_type}"]["count"]
    got = {k: tuple(v.shape) for k, v in _meta_gpt("GPT-B", model_type).state_dict().items()}
    assert sorted(got) == sorted(want)
    assert got == want


def test_config_inferred_from_official_shapes():
    for size in ("GPT-B", "GPT-XL", "GPT-3B"):
        for model_type in ("c2i", "t2i"):
            sd = _meta_gpt(size, model_type).state_dict()
            cfg = infer_gpt_config(sd)
            n_layer, n_head, dim = GPT_SIZES[size]
            assert (cfg.n_layer, cfg.n_head, cfg.dim, cfg.model_type) == (n_layer, n_head, dim, model_type)
            assert cfg.vocab_size == 16384 and cfg.ffn_hidden_dim is None and cfg.n_kv_head is None
            if model_type == "c2i":
                assert (cfg.num_classes, cfg.cls_token_num) == (1000, 1)
            else:
                assert (cfg.caption_dim, cfg.cls_token_num) == (2048, 120)
    # the head count is invisible in the shapes: the named size or an explicit override decides
    sd = _meta_gpt("GPT-B").state_dict()
    assert infer_gpt_config(sd, size="GPT-B").n_head == 12
    assert infer_gpt_config(sd, n_head=6).n_head == 6


def test_cache_attention_mask_definition():
    """mask[b, 0, i, j] = j <= p_i and (valid[b, j] or j == p_i), in the fast (all valid) and masked modes."""
    from mulosd_core.models.kv_cache import KVCache

    def naive(cache, positions):
        out = torch.zeros(cache.batch, 1, len(positions), cache.max_len, dtype=torch.bool)
        for b in range(cache.batch):
            for i, p in enumerate(positions.tolist()):
                for j in range(cache.max_len):
                    out[b, 0, i, j] = j <= p and (bool(cache.valid[b, j]) or j == p)
        return out

    for key_valid in (None, torch.tensor([[False, True, True], [True, False, True]])):
        cache = KVCache(1, 2, 1, 16, 4, torch.float32, "cpu")
        cache.mark(torch.arange(3), key_valid)
        assert torch.equal(cache.attention_mask(torch.arange(3)), naive(cache, torch.arange(3)))
        cache.mark(torch.arange(3, 9))
        pos = torch.tensor([6, 7, 8])
        assert torch.equal(cache.attention_mask(pos), naive(cache, pos))
        cache.truncate(7)
        cache.mark(torch.tensor([7]))
        assert torch.equal(cache.attention_mask(torch.tensor([7])), naive(cache, torch.tensor([7])))
        cache.reset()
        assert not cache.valid.any()
