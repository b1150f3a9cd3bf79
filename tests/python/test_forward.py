"""Forward-only graphs on a trainer's parameters (Trainer.compile_forward) and GPT-2's generation
from Python: the decoder's graph and the sampler need no GPU; running them skips with the reason
where no GPU is visible."""

import math

import numpy as np
import pytest

import reprise

models = reprise.models


def config(batch=2):
    return models.Gpt2Config(batch=batch, seq=16, max_positions=16, vocab=64, layers=1, heads=2,
                             width=32)


def test_the_decoder_takes_one_token_per_sequence():
    decoder = models.build_gpt2_decoder(config(batch=3), reprise.DType.bfloat16)
    graph = decoder.graph
    assert graph.shape(decoder.tokens) == [3] and graph.dtype(decoder.tokens) == reprise.DType.int32
    assert graph.shape(decoder.logits) == [3, 64]  # The vocabulary, unpadded.
    assert graph.shape(decoder.position) == [1]
    trained = set(models.build_gpt2(config(batch=3)).graph.parameter_names)
    assert set(graph.parameter_names) <= trained  # Read from a trainer of BuildGpt2 by name.
    with pytest.raises(ValueError):
        models.build_gpt2_decoder(config(), reprise.DType.int32)


def test_sampling_is_greedy_at_temperature_zero_and_checked():
    logits = np.array([0.5, 3.0, 1.0, 3.0], np.float32)
    assert models.sample_token(logits, 0.99, temperature=0) == 1  # The first largest.
    # top_k=2 keeps tokens 1 and 3, equally likely: the draw picks one by its half.
    assert models.sample_token(logits, 0.25, temperature=1.0, top_k=2) == 1
    assert models.sample_token(logits, 0.75, temperature=1.0, top_k=2) == 3
    with pytest.raises(ValueError, match="no logits"):
        models.sample_token(np.zeros(0, np.float32), 0.5)
    with pytest.raises(ValueError, match="logit 2 is NaN"):
        models.sample_token(np.array([0, 1, np.nan], np.float32), 0.5)
    with pytest.raises(ValueError, match="temperature must be finite and >= 0, got -1"):
        models.sample_token(logits, 0.5, temperature=-1)
    with pytest.raises(ValueError, match="logit 1 is \\+inf"):
        models.sample_token(np.array([0, np.inf], np.float32), 0.5)
    with pytest.raises(ValueError, match=r"the draw must be in \[0, 1\), got 1"):
        models.sample_token(logits, 1.0)
    masked = np.array([-np.inf, 2.0, -np.inf], np.float32)  # -inf: a token never drawn.
    assert models.sample_token(masked, 0.999, temperature=1.0) == 1


def bf16_trainer(gpt):
    options = reprise.TrainOptions(compute_dtype=reprise.DType.bfloat16, deterministic=True)
    return reprise.Trainer.create(gpt.graph, gpt.loss, options)


def batch(c, step):
    rng = np.random.default_rng(step)
    tokens = rng.integers(0, c.vocab, (c.batch, c.seq), dtype=np.int32)
    return tokens, ((tokens + 1) % c.vocab).astype(np.int32)


def test_a_forward_runner_reads_the_trainers_latest_weights(gpu):
    c = config()
    gpt = models.build_gpt2(c)
    trainer = bf16_trainer(gpt)
    evaluator = trainer.compile_forward(gpt.graph, [gpt.loss, gpt.logits])
    for step in range(3):
        tokens, targets = batch(c, step)
        evaluator.set_input("tokens", tokens)
        evaluator.set_input("targets", targets)
        evaluator.run()  # Queued before the step: the weights the step starts from.
        trainer.set_input("tokens", tokens)
        trainer.set_input("targets", targets)
        trainer.step()
        evaluated = float(evaluator.read(gpt.loss))
        assert math.isfinite(evaluated)
        assert evaluated == pytest.approx(trainer.loss(), rel=2e-2)
    logits = evaluator.read(gpt.logits)
    assert logits.shape == (c.batch * c.seq, models.gpt2_logits_width(c))
    stats = evaluator.stats()
    assert stats.runs == 3 and stats.graph_captures == 1 and stats.shared_parameter_bytes > 0
    assert "runs" in str(stats)
    with pytest.raises(ValueError, match=r"input 'tokens' is i32\[2, 16\]; got an array of shape"):
        evaluator.set_input("tokens", np.zeros((2, 15), np.int32))
    with pytest.raises(ValueError, match="input 'tokens' is i32"):
        evaluator.set_input("tokens", np.zeros((2, 16), np.float32))
    bad = tokens.copy()
    bad[0, 0] = c.vocab
    with pytest.raises(ValueError, match="'tokens'"):
        evaluator.set_input("tokens", bad)


def test_generation_is_greedy_and_repeatable(gpu):
    c = config()
    gpt = models.build_gpt2(c)
    trainer = bf16_trainer(gpt)
    tokens, targets = batch(c, 0)
    trainer.set_input("tokens", tokens)
    trainer.set_input("targets", targets)
    for _ in range(20):
        trainer.step()
    generator = models.Gpt2Generator.create(trainer, c)
    first = generator.generate([[1, 2, 3], [7]], 6, temperature=0)
    assert [len(t) for t in first] == [6, 6]
    assert all(0 <= t < c.vocab for seq in first for t in seq)
    assert generator.generate([[1, 2, 3], [7]], 6, temperature=0) == first
    sampled = generator.generate([[1], [2]], 4, temperature=0.8, top_k=5, seed=3)
    assert sampled == generator.generate([[1], [2]], 4, temperature=0.8, top_k=5, seed=3)
    with pytest.raises(ValueError):
        generator.generate([[1]], 4)  # One prompt for a batch of two.
    with pytest.raises(ValueError):
        generator.generate([[1], [2]], 17)  # 17 positions: past the cache's 16.
