"""GPT-2 through the Python module: built and named without a GPU; trained where one is visible."""

import math

import numpy as np
import pytest

import reprise


def small_config():
    return reprise.models.Gpt2Config(batch=2, seq=16, max_positions=32, vocab=64, layers=2,
                                     heads=2, width=32)


def nanogpt_names(layers):
    names = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
             "transformer.ln_f.bias"}
    for i in range(layers):
        for part in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names |= {f"transformer.h.{i}.{part}.weight", f"transformer.h.{i}.{part}.bias"}
    return names


def test_config_defaults_are_gpt2_small():
    c = reprise.models.Gpt2Config()
    assert (c.batch, c.seq, c.max_positions, c.vocab, c.layers, c.heads, c.width) == (
        16, 1024, 1024, 50257, 12, 12, 768)
    assert c.init_std == pytest.approx(0.02)
    assert c.padded_vocab == 0
    assert reprise.models.gpt2_logits_width(c) == 50304  # 50257 padded to a multiple of 128.
    c.width = 64
    assert c.width == 64


def test_default_model_has_124m_parameters_under_nanogpt_names():
    gpt = reprise.models.build_gpt2(reprise.models.Gpt2Config())
    assert gpt.graph.num_parameter_elements == 124_439_808
    assert set(gpt.graph.parameter_names) == nanogpt_names(12)
    assert "lm_head.weight" not in gpt.graph.parameter_names  # Tied to transformer.wte.weight.


def test_small_model_values_and_shapes():
    gpt = reprise.models.build_gpt2(small_config())
    assert set(gpt.graph.parameter_names) == nanogpt_names(2)
    assert gpt.graph.shape(gpt.tokens) == [2, 16]
    assert gpt.graph.dtype(gpt.tokens) == reprise.DType.int32
    assert gpt.graph.shape(gpt.targets) == [2, 16]
    assert gpt.graph.shape(gpt.logits) == [32, 128]  # 64 tokens padded to 128 columns.
    assert gpt.graph.shape(gpt.loss) == []
    unpadded = small_config()
    unpadded.padded_vocab = 64
    plain = reprise.models.build_gpt2(unpadded)
    assert plain.graph.shape(plain.logits) == [32, 64]


def test_bad_config_raises_naming_the_field():
    with pytest.raises(ValueError, match="heads"):
        reprise.models.build_gpt2(reprise.models.Gpt2Config(heads=5))
    with pytest.raises(ValueError, match="seq"):
        reprise.models.build_gpt2(reprise.models.Gpt2Config(seq=2048))
    with pytest.raises(ValueError, match="padded_vocab"):
        reprise.models.build_gpt2(reprise.models.Gpt2Config(padded_vocab=50000))
    with pytest.raises(TypeError):
        reprise.models.Gpt2Config(widht=64)


def test_small_gpt2_trains_and_replays_like_eager(gpu):
    c = small_config()
    gpt = reprise.models.build_gpt2(c)
    options = reprise.TrainOptions(
        compute_dtype=reprise.DType.bfloat16,
        optimizer=reprise.OptimizerOptions(kind=reprise.OptimizerKind.adamw, learning_rate=3e-3,
                                           beta2=0.95, weight_decay=0.1, decay_rank1=False,
                                           max_grad_norm=1.0))
    trainer = reprise.Trainer.create(gpt.graph, gpt.loss, options)
    assert set(trainer.parameter_names()) >= nanogpt_names(2)
    # Each next token is the current one plus 1: learnable from the current token alone.
    tokens = (np.arange(c.batch * c.seq).reshape(c.batch, c.seq) * 5 % c.vocab).astype(np.int32)
    targets = ((tokens + 1) % c.vocab).astype(np.int32)
    trainer.set_input("tokens", tokens)
    trainer.set_input("targets", targets)
    trainer.step()
    first = trainer.loss()
    assert abs(first - math.log(c.vocab)) < 0.1, first
    for _ in range(60):
        trainer.step()
    last = trainer.loss()
    assert last < 0.5 * first, (first, last)
    result = trainer.verify(3)
    assert result.ok, str(result)
    bad = tokens.copy()
    bad[1, 3] = c.vocab
    with pytest.raises(ValueError, match="'tokens'"):
        trainer.set_input("tokens", bad)
