"""reprise.data: token shards and their loaders from Python (no GPU needed), and the trainer's input
buffers they write into (those tests skip with the reason where no GPU is visible)."""

import math
import os
import stat

import numpy as np
import pytest

import reprise
from reprise import data


def shard(tmp_path, name, tokens):
    path = str(tmp_path / name)
    data.write_token_shard(path, np.asarray(tokens))
    return path


def test_a_written_shard_reads_back_in_llm_c_format(tmp_path):
    tokens = (np.arange(3000) * 7919) % 50257
    path = shard(tmp_path, "a.bin", tokens)
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:data.TOKEN_SHARD_HEADER_BYTES], np.int32)
    assert header[0] == data.TOKEN_SHARD_MAGIC == 20240520
    assert header[1] == data.TOKEN_SHARD_VERSION and header[2] == 3000
    assert len(raw) == data.TOKEN_SHARD_HEADER_BYTES + 2 * 3000
    opened = data.TokenShard.open(path, 50257)
    assert (len(opened), opened.num_tokens, opened.vocab_size) == (3000, 3000, 50257)
    assert opened.path == path
    got = opened.read(100, 50)
    assert got.dtype == np.uint16 and np.array_equal(got, tokens[100:150])
    opened.check_all_tokens()


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.uint64])
def test_every_integer_dtype_is_taken(tmp_path, dtype):
    tokens = np.array([0, 1, 200, 77], dtype)
    opened = data.TokenShard.open(shard(tmp_path, "t.bin", tokens), 256)
    assert np.array_equal(opened.read(0, 4), [0, 1, 200, 77])


@pytest.mark.parametrize("tokens, message", [
    (np.array([3, -1], np.int64), r"token 1 is -1, outside the uint16 ids"),
    (np.array([65536], np.int32), r"token 0 is 65536, outside"),
    (np.array([2**64 - 1], np.uint64), r"token 0 is 18446744073709551615, outside"),
    (np.array([1.0, 2.0]), r"token ids must be integers, got float64"),
])
def test_ids_a_shard_cannot_hold_are_refused_not_wrapped(tmp_path, tokens, message):
    path = str(tmp_path / "bad.bin")
    with pytest.raises(ValueError, match=message):
        data.write_token_shard(path, tokens)
    assert not os.path.exists(path)


def test_what_is_not_a_1d_array_is_a_type_error(tmp_path):
    for tokens in ([1, 2, 3], np.zeros((2, 2), np.int32)):
        with pytest.raises(TypeError, match="expected a 1-D NumPy array of token ids, got "):
            data.write_token_shard(str(tmp_path / "x.bin"), tokens)
    strided = np.arange(8, dtype=np.int32)[::2]  # Taken: its values are copied.
    opened = data.TokenShard.open(shard(tmp_path, "s.bin", strided), 8)
    assert np.array_equal(opened.read(0, 4), [0, 2, 4, 6])


def test_bad_shards_are_refused_naming_the_file(tmp_path):
    good = shard(tmp_path, "good.bin", np.arange(100))
    raw = open(good, "rb").read()
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(raw[:-3])
    with pytest.raises(OSError, match="truncated.bin' is truncated"):
        data.TokenShard.open(str(truncated), 256)
    magic = tmp_path / "magic.bin"
    magic.write_bytes(b"\0\0\0\0" + raw[4:])
    with pytest.raises(ValueError, match="magic.bin' has magic 0, not 20240520"):
        data.TokenShard.open(str(magic), 256)
    with pytest.raises(KeyError, match="missing.bin"):
        data.TokenShard.open(str(tmp_path / "missing.bin"), 256)
    with pytest.raises(ValueError, match="is a directory, not a regular file"):
        data.TokenShard.open(str(tmp_path), 256)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(ValueError, match="is a named pipe \\(FIFO\\)"):  # Refused, not waited on.
        data.TokenShard.open(str(fifo), 256)
    with pytest.raises(ValueError, match="vocabulary size 0"):
        data.TokenShard.open(good, 0)


def test_reads_outside_the_shard_or_the_vocabulary_are_refused(tmp_path):
    opened = data.TokenShard.open(shard(tmp_path, "s.bin", np.arange(100)), 50)
    with pytest.raises(ValueError, match=r"tokens \[90, 110\) are outside its 100 tokens"):
        opened.read(90, 20)
    with pytest.raises(ValueError, match="cannot read -1 tokens"):
        opened.read(0, -1)
    with pytest.raises(ValueError, match="outside its 100 tokens"):  # Refused before allocating.
        opened.read(0, 2**62)
    with pytest.raises(ValueError, match="token 50 at position 50 is outside the vocabulary of 50"):
        opened.read(40, 20)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        opened.check_all_tokens()


def windows(tokens, seq):
    """The loader's windows of one shard: seq + 1 tokens starting every seq tokens."""
    return [tokens[w * seq:w * seq + seq + 1] for w in range((len(tokens) - 1) // seq)]


def test_an_epoch_reads_every_window_once_shuffled_by_the_seed(tmp_path):
    a, b = np.arange(0, 401), np.arange(1000, 1161)
    shards = [shard(tmp_path, "a.bin", a), shard(tmp_path, "b.bin", b)]
    seq, batch = 8, 5
    expected = windows(a, seq) + windows(b, seq)  # 50 + 20 windows.
    loader = data.TokenLoader(shards, batch_size=batch, sequence_length=seq, vocab_size=1200,
                              seed=7)
    assert loader.windows_per_epoch == 70 and loader.tokens_per_batch == batch * seq
    seen = []
    for _ in range(70 // batch):
        inputs, targets = loader.next()
        assert inputs.shape == targets.shape == (batch, seq) and inputs.dtype == np.int32
        assert np.array_equal(inputs[:, 1:], targets[:, :-1])
        seen += [tuple(np.append(i, t[-1])) for i, t in zip(inputs, targets)]
    assert sorted(seen) == sorted(tuple(w) for w in expected)
    assert seen != [tuple(w) for w in expected]  # Shuffled.
    assert (loader.next_batch, loader.epoch) == (14, 1)
    again = data.TokenLoader(shards, batch_size=batch, sequence_length=seq, vocab_size=1200, seed=7)
    other = data.TokenLoader(shards, batch_size=batch, sequence_length=seq, vocab_size=1200, seed=8)
    first, _ = again.next()
    assert np.array_equal(first, np.array([s[:seq] for s in seen[:batch]]))
    assert not np.array_equal(other.next()[0], first)


def test_first_batch_resumes_where_a_run_left(tmp_path):
    shards = [shard(tmp_path, "a.bin", np.arange(2000) % 997)]
    options = dict(batch_size=4, sequence_length=16, vocab_size=997, seed=3)
    loader = data.TokenLoader(shards, **options)
    batches = [next(loader) for _ in range(40)]  # Past the end of epoch 0 (31 batches).
    resumed = data.TokenLoader(shards, first_batch=33, prefetch=1, **options)
    for k in range(33, 40):
        inputs, targets = resumed.next()
        assert np.array_equal(inputs, batches[k][0]) and np.array_equal(targets, batches[k][1])


def test_next_into_writes_the_callers_arrays(tmp_path):
    shards = [shard(tmp_path, "a.bin", np.arange(500))]
    options = dict(batch_size=2, sequence_length=10, vocab_size=500, seed=1)
    expected = data.TokenLoader(shards, **options).next()
    loader = data.TokenLoader(shards, **options)
    inputs, targets = np.full((2, 10), -1, np.int32), np.full(20, -1, np.int32)
    loader.next_into(inputs, targets)  # Any shape of B * T values.
    assert np.array_equal(inputs, expected[0])
    assert np.array_equal(targets.reshape(2, 10), expected[1])
    with pytest.raises(ValueError, match=r"inputs hold 19 and targets 20 values; both must hold "
                                         r"B \* T = 2 \* 10 = 20"):
        loader.next_into(np.zeros(19, np.int32), targets)
    read_only = np.zeros(20, np.int32)
    read_only.setflags(write=False)
    for bad, what in ((np.zeros(20, np.int64), "an array of int64"),
                      (read_only, "an int32 array that is read-only"),
                      (np.zeros(40, np.int32)[::2], "an int32 array that is read-only, strided"),
                      ([0] * 20, "list")):
        with pytest.raises(TypeError, match="inputs must be a writable, C-contiguous int32 host "
                                            "array; got " + what):
            loader.next_into(bad, targets)
    assert loader.next_batch == 1  # The refused calls consumed nothing.


def test_loader_options_are_checked(tmp_path):
    good = [shard(tmp_path, "a.bin", np.arange(100))]
    cases = [([], 2, 8, 100, "no shards given"),
             (good, 0, 8, 100, "batch size 0"),
             (good, 2, 100, 100, "fewer than"),
             (good, 2, 8, 70000, "vocabulary"),
             ([str(tmp_path / "none.bin")], 2, 8, 100, "none.bin")]
    for shards, batch, seq, vocab, message in cases:
        with pytest.raises((ValueError, KeyError), match=message):
            data.TokenLoader(shards, batch_size=batch, sequence_length=seq, vocab_size=vocab)
    with pytest.raises(ValueError, match="prefetch"):
        data.TokenLoader(good, batch_size=2, sequence_length=8, vocab_size=100, prefetch=0)
    with pytest.raises(ValueError, match="outside the vocabulary of 50"):
        data.TokenLoader(good, batch_size=2, sequence_length=8, vocab_size=50,
                         check_all_tokens=True)


def test_a_bad_token_is_an_error_not_a_batch(tmp_path):
    shards = [shard(tmp_path, "a.bin", np.arange(100))]
    loader = data.TokenLoader(shards, batch_size=11, sequence_length=8, vocab_size=60, seed=0)
    with pytest.raises(ValueError, match=r"a.bin': token \d+ at position \d+ is outside the "
                                         r"vocabulary of 60 ids"):
        loader.next()
    with pytest.raises(ValueError, match="outside the vocabulary"):  # And every call after.
        loader.next()


def test_the_sequential_reader_runs_one_pass_in_file_order(tmp_path):
    a, b = np.arange(0, 170), np.arange(500, 600)
    shards = [shard(tmp_path, "a.bin", a), shard(tmp_path, "b.bin", b)]
    reader = data.SequentialTokenReader(shards, batch_size=4, sequence_length=10, vocab_size=600)
    every = windows(a, 10) + windows(b, 10)  # 16 + 9 windows: 6 whole batches.
    assert reader.num_batches == 6
    batches = list(reader)
    assert len(batches) == 6
    for k, (inputs, targets) in enumerate(batches):
        for row in range(4):
            window = every[4 * k + row]
            assert np.array_equal(inputs[row], window[:-1])
            assert np.array_equal(targets[row], window[1:])
    with pytest.raises(ValueError, match="all 6 batches read"):
        reader.next()
    reader.rewind()
    inputs, targets = np.zeros(40, np.int32), np.zeros(40, np.int32)
    reader.next_into(inputs, targets)
    assert np.array_equal(inputs, batches[0][0].ravel())


@pytest.fixture
def tiny_gpt2():
    return reprise.models.build_gpt2(reprise.models.Gpt2Config(
        batch=2, seq=16, max_positions=16, vocab=64, layers=1, heads=2, width=32))


def bf16_trainer(gpt):
    # Deterministic plans: two trainers given the same batches compute the same bits.
    options = reprise.TrainOptions(compute_dtype=reprise.DType.bfloat16, deterministic=True)
    return reprise.Trainer.create(gpt.graph, gpt.loss, options)


def test_input_buffers_take_the_loaders_batches(gpu, tmp_path, tiny_gpt2):
    shards = [shard(tmp_path, "a.bin", (np.arange(4000) * 31) % 64)]
    options = dict(batch_size=2, sequence_length=16, vocab_size=64, seed=5)
    copied, direct = bf16_trainer(tiny_gpt2), bf16_trainer(tiny_gpt2)
    feed, into = data.TokenLoader(shards, **options), data.TokenLoader(shards, **options)
    for _ in range(5):
        tokens, targets = feed.next()
        copied.set_input("tokens", tokens)
        copied.set_input("targets", targets)
        copied.step()
        buffer = direct.input_buffer("tokens")
        assert buffer.shape == (2, 16) and buffer.dtype == np.int32
        into.next_into(buffer, direct.input_buffer("targets"))
        direct.step()
        assert copied.loss() == direct.loss() and math.isfinite(direct.loss())
    assert direct.skipped_steps() == 0 and direct.loss_scale() == 1.0
    with pytest.raises(KeyError, match="nope"):
        direct.input_buffer("nope")


def test_an_input_buffer_outlives_nothing_it_needs(gpu, tiny_gpt2):
    trainer = bf16_trainer(tiny_gpt2)
    buffer = trainer.input_buffer("tokens")
    del trainer  # The view keeps the trainer, and so its pinned buffer, alive.
    buffer[:] = 3
    assert int(buffer.sum()) == 3 * 32

