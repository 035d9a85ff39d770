"""T5 caption encoder on a tiny random T5 and a tiny word-level tokenizer, built offline in tmp_path."""
from __future__ import annotations

import json

import pytest
import torch

from mulosd_core.models.text_encoder import T5CaptionEncoder, clean_caption, left_pad

WORDS = "a an the red green blue cat dog bird sits on mat in garden under tree photo of with small big".split()
D_MODEL = 24


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    folder = tmp_path_factory.mktemp("tiny-flan-t5")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])  # T5 appends </s>
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=512)
    fast.save_pretrained(str(folder))
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=100, d_model=D_MODEL, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5EncoderModel(cfg).eval().save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def encoder(t5_folder):
    return T5CaptionEncoder(t5_folder, "cpu", torch.float32, max_length=12)


def test_shapes_and_default_length(t5_folder):
    enc = T5CaptionEncoder(t5_folder, "cpu", torch.float32)
    emb, mask = enc.encode(["a red cat sits on the mat", "dog"])
    assert emb.shape == (2, 120, D_MODEL) and mask.shape == (2, 120)
    assert emb.dtype == torch.float32 and enc.dim == D_MODEL
    assert mask.sum(1).tolist() == [8, 2]  # words + </s>


def test_left_padding_layout(encoder):
    prompts = ["a red cat sits on the mat", "dog", "a small green bird in the garden under a big tree"]
    emb, mask = encoder.encode(prompts)
    ids, raw_mask = encoder.tokenize(prompts)
    n = raw_mask.sum(1)
    assert n.tolist() == [8, 2, 12]  # the last caption is truncated to max_length, </s> kept by truncation
    for i in range(3):
        want_mask = torch.zeros(12, dtype=mask.dtype)
        want_mask[12 - n[i]:] = 1
        assert torch.equal(mask[i], want_mask)
        assert torch.count_nonzero(emb[i, : 12 - n[i]]) == 0  # padded rows (now first) are zero
        assert (emb[i, 12 - n[i]:].abs().sum(-1) > 0).all()
    # the valid rows are exactly the encoder's outputs of the real tokens, in order
    with torch.no_grad():
        direct = encoder.model(input_ids=ids, attention_mask=raw_mask).last_hidden_state
    for i in range(3):
        assert torch.allclose(emb[i, 12 - n[i]:], direct[i, : n[i]], atol=1e-6)


def test_left_pad_matches_upstream_rotation():
    emb = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    out, m = left_pad(emb, mask)
    for i in range(2):
        v = int(mask[i].sum())
        want = torch.cat([emb[i, v:], emb[i, :v]]) * torch.flip(mask[i], [0])[:, None]
        assert torch.equal(out[i], want)
    assert m.tolist() == [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]]


def test_cleaning(encoder):
    assert clean_caption("  A   Red\n\tCat  ") == "a red cat"
    assert clean_caption("A Red", lowercase=False) == "A Red"
    a, _ = encoder.encode(["  A   RED\ncat "])
    b, _ = encoder.encode(["a red cat"])
    assert torch.equal(a, b)


def test_empty_prompt_is_an_error(encoder):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        encoder.encode(["a cat", "   \n "])
    with pytest.raises(ValueError, match="no prompts"):
        encoder.encode([])
    with pytest.raises(TypeError):
        encoder.encode("a cat")


def test_not_a_t5_folder(tmp_path, t5_folder):
    with pytest.raises(ValueError, match=f"{tmp_path}.*config.json is missing"):
        T5CaptionEncoder(str(tmp_path))
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=f"{bert}.*model_type='bert'"):
        T5CaptionEncoder(str(bert))
    with pytest.raises(ValueError, match="not a folder"):
        T5CaptionEncoder(str(tmp_path / "missing"))
    # a T5 config without weights: the error still names the folder
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_text(open(f"{t5_folder}/config.json").read())
    with pytest.raises(ValueError, match=str(noweights)):
        T5CaptionEncoder(str(noweights))


def test_features_drive_a_tiny_t2i_gpt(encoder):
    from mulosd_core.decode import generate_ar
    from mulosd_core.sampling import SamplingConfig
    from mulosd_core.testing import tiny_model

    model = tiny_model(grid=3, seed=4, model_type="t2i", caption_dim=encoder.dim, cls_token_num=encoder.max_length)
    emb, mask = encoder.encode(["a red cat", "a blue bird in the garden"])
    res = generate_ar(model, emb, SamplingConfig(cfg_scale=4.0, temperature=0.0), mask=mask, decode=False)
    assert res.tokens.shape == (2, 9)
    # padded caption rows are masked: changing them does not change the result
    noisy = emb + torch.randn_like(emb) * (1 - mask[..., None].float())
    again = generate_ar(model, noisy, SamplingConfig(cfg_scale=4.0, temperature=0.0), mask=mask, decode=False)
    assert torch.equal(res.tokens, again.tokens)
    with pytest.raises(ValueError, match="expects 12 caption tokens"):
        generate_ar(model, emb[:, 1:], SamplingConfig(), mask=mask[:, 1:], decode=False)
