"""tools/data/decode_tokens.py: train_gpt2's sample lines of token ids back to text, prompts to
ids, other lines passed through, ids outside the vocabulary refused."""

import importlib.util
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "data", "decode_tokens.py")
spec = importlib.util.spec_from_file_location("decode_tokens", SCRIPT)
decode_tokens = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_tokens)


def run(capsys, monkeypatch, text, *args):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = decode_tokens.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_byte_tokens_decode_and_other_lines_pass(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, "step 10/20 loss 1.5\nsample 3: 72 105 | 256 33\n",
                       "--tokenizer", "byte")
    assert code == 0
    assert out == "step 10/20 loss 1.5\nsample 3: Hi<|endoftext|>!\n"


def test_byte_encode_then_decode(capsys, monkeypatch):
    assert decode_tokens.main(["--tokenizer", "byte", "--encode", "To be"]) == 0
    ids = capsys.readouterr().out.strip()
    assert ids == "84,111,32,98,101"
    code, out, _ = run(capsys, monkeypatch, ids.replace(",", " ") + "\n", "--tokenizer", "byte")
    assert (code, out) == (0, "To be\n")


def test_a_token_outside_the_vocabulary_is_refused(capsys, monkeypatch):
    code, _, err = run(capsys, monkeypatch, "sample 0: 300\n", "--tokenizer", "byte")
    assert code == 1
    assert "token 300 is not a byte token" in err


def test_gpt2_round_trip(capsys, monkeypatch):
    try:
        decode_tokens.build_shards.make_tokenizer("gpt2")
    except decode_tokens.build_shards.BuildError as e:
        pytest.skip(str(e))
    assert decode_tokens.main(["--encode", "ROMEO: hello, world"]) == 0
    ids = capsys.readouterr().out.strip()
    assert ids == "33676,4720,25,23748,11,995"
    code, out, _ = run(capsys, monkeypatch, "sample 0: 50256 | " + ids.replace(",", " ") + "\n")
    assert (code, out) == (0, "sample 0: <|endoftext|>ROMEO: hello, world\n")
