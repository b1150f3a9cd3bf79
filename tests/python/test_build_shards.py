"""tools/data/build_shards.py: shards in llm.c's layout that decode back to the input text, split
and sized as asked, the same bytes on every run; GPT-2's BPE gives GPT-2's ids."""

import array
import importlib.util
import os
import stat
import struct

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "data", "build_shards.py")
spec = importlib.util.spec_from_file_location("build_shards", SCRIPT)
build_shards = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_shards)


def read_shard(path):
    """(header ints, tokens) of a shard, read with nothing from the script."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    tokens = array.array("H")
    tokens.frombytes(data[1024:])
    return header, list(tokens), len(data)


@pytest.fixture
def texts(tmp_path):
    docs = {
        "a.txt": "First Citizen:\nBefore we proceed any further, hear me speak.\n",
        "b.txt": "All:\nSpeak, speak.\n",
        "c.txt": "Caf\u00e9 \u2014 na\u00efve r\u00e9sum\u00e9? 12345\n",
        "d.txt": "MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\n",
    }
    paths = []
    for name, text in docs.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return docs, paths


def run(args):
    assert build_shards.main(args) == 0


def test_byte_shards_hold_the_text(tmp_path, texts, capsys):
    docs, paths = texts
    out = tmp_path / "out"
    run(["--text", *paths, "--tokenizer", "byte", "--val-every", "3", "--out", str(out)])
    printed = capsys.readouterr().out
    # Sorted documents 0 and 3 (a, d) are validation; b, c training.
    expected = {"val": ["a.txt", "d.txt"], "train": ["b.txt", "c.txt"]}
    for split, names in expected.items():
        path = out / f"text_{split}_000000.bin"
        header, tokens, size = read_shard(path)
        assert header[:3] == (20240520, 1, len(tokens))
        assert all(v == 0 for v in header[3:])
        assert size == 1024 + 2 * len(tokens)
        want = []
        for name in names:
            want += [256] + list(docs[name].encode("utf-8"))
        assert tokens == want
        assert f"{path}: {len(tokens)} tokens" in printed
        assert f"{split}: {len(tokens)} tokens" in printed


def test_output_is_deterministic(tmp_path, texts):
    _, paths = texts
    first, second = tmp_path / "one", tmp_path / "two"
    run(["--text", *paths, "--tokenizer", "byte", "--val-every", "2", "--out", str(first)])
    run(["--text", *reversed(paths), "--tokenizer", "byte", "--val-every", "2", "--out",
         str(second)])
    names = sorted(os.listdir(first))
    assert names == sorted(os.listdir(second)) == ["text_train_000000.bin", "text_val_000000.bin"]
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_shards_split_at_shard_tokens(tmp_path, texts):
    docs, paths = texts
    out = tmp_path / "out"
    run(["--text", *paths, "--tokenizer", "byte", "--val-every", "4", "--shard-tokens", "40",
         "--out", str(out)])
    train = sorted(p for p in os.listdir(out) if "_train_" in p)
    all_tokens = []
    for index, name in enumerate(train):
        assert name == f"text_train_{index:06d}.bin"
        header, tokens, _ = read_shard(out / name)
        assert header[2] == len(tokens) <= 40
        all_tokens += tokens
    want = []
    for name in ("b.txt", "c.txt", "d.txt"):
        want += [256] + list(docs[name].encode("utf-8"))
    assert all_tokens == want
    assert len(train) == (len(want) + 39) // 40


def test_refuses_one_document_and_missing_file(tmp_path, texts, capsys):
    _, paths = texts
    assert build_shards.main(["--text", paths[0], "--tokenizer", "byte", "--out",
                              str(tmp_path)]) == 1
    assert "at least 2 documents" in capsys.readouterr().err
    missing = str(tmp_path / "missing.txt")
    assert build_shards.main(["--text", paths[0], missing, "--tokenizer", "byte", "--out",
                              str(tmp_path)]) == 1
    assert missing in capsys.readouterr().err


def test_shards_replace_only_regular_files(tmp_path, texts, capsys):
    """A shard's path that is a FIFO (or a device, or a folder) is refused and stays; a symbolic
    link keeps pointing at its target, which gets the shard; no temporary file is left."""
    _, paths = texts
    args = ["--text", *paths, "--tokenizer", "byte", "--val-every", "3"]
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "text_val_000000.bin"
    os.mkfifo(fifo)
    assert build_shards.main(args + ["--out", str(out)]) == 1
    assert f"{fifo}: is not a regular file; refusing to replace it" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]

    linked = tmp_path / "linked"
    linked.mkdir()
    (tmp_path / "kept.bin").write_bytes(b"old")
    os.symlink(tmp_path / "kept.bin", linked / "text_val_000000.bin")
    run(args + ["--out", str(linked)])
    assert os.path.islink(linked / "text_val_000000.bin")
    header, tokens, _ = read_shard(tmp_path / "kept.bin")
    assert header[2] == len(tokens) > 0
    assert sorted(os.listdir(linked)) == ["text_train_000000.bin", "text_val_000000.bin"]


def test_markdown_play_becomes_plain_text():
    markdown = ("# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO_\n\n"
                "**BERNARDO**  \nWho's there?\n\n**LYSANDER**  \n__\\[Awaking]_  \n"
                "And run through fire--  \nI will\\.\n")
    assert build_shards.markdown_play_to_text(markdown) == (
        "Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nEnter BERNARDO\n\nBERNARDO:\nWho's there?\n\n"
        "LYSANDER:\n[Awaking]\nAnd run through fire--\nI will.\n")


def gpt2_tokenizer():
    pytest.importorskip("regex")
    try:
        return build_shards.make_tokenizer("gpt2")
    except build_shards.BuildError as e:
        pytest.skip(str(e))


def test_gpt2_bpe_gives_gpt2_ids():
    tokenizer = gpt2_tokenizer()
    assert tokenizer.vocab_size == 50257 and tokenizer.eot == 50256
    # GPT-2's ids as its published tokenizer gives them.
    assert tokenizer.encode("Hello world") == [15496, 995]
    assert tokenizer.encode("Hello, world!") == [15496, 11, 995, 0]
    assert tokenizer.encode(" the") == [262]
    assert tokenizer.encode("<|endoftext|>") != [50256]  # Text is never the special token.
    # Every byte sequence round-trips: decode by the inverse of the byte map.
    decoder = {v: k for k, v in tokenizer._encoder.items()}
    byte_of = {c: b for b, c in build_shards.gpt2_byte_symbols().items()}
    text = "Caf\u00e9 \u2014 na\u00efve\n\n  r\u00e9sum\u00e9's 2024\t\U0001F600 they'll"
    ids = tokenizer.encode(text)
    decoded = bytes(byte_of[c] for i in ids for c in decoder[i]).decode("utf-8")
    assert decoded == text


def test_gpt2_shards(tmp_path, texts):
    tokenizer = gpt2_tokenizer()
    docs, paths = texts
    out = tmp_path / "out"
    run(["--text", *paths, "--val-every", "3", "--out", str(out)])
    header, tokens, size = read_shard(out / "text_train_000000.bin")
    assert header[:3] == (20240520, 1, len(tokens)) and size == 1024 + 2 * len(tokens)
    assert tokens == ([50256] + tokenizer.encode(docs["b.txt"]) + [50256] +
                      tokenizer.encode(docs["c.txt"]))
    assert max(tokens) < 50257
