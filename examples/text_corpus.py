# SPDX-License-Identifier: Apache-2.0
"""An offline byte-level text corpus and a dataset of variable-length samples cut from it.

load_corpus() reads the license texts Debian's base-files package installs under
/usr/share/common-licenses (real English prose, present on every Debian/Ubuntu machine); without
them it reads the sources of a few standard-library modules. ByteSequenceDataset cuts the corpus
into samples whose lengths follow a clipped log-normal distribution (a few long samples among many
short ones, like real training data), each starting at the beginning of a line."""
from __future__ import annotations

import bisect
import importlib.util
import math
import os
import random
import re
from typing import Optional

import torch

LICENSE_DIR = "/usr/share/common-licenses"
FALLBACK_MODULES = ("textwrap", "argparse", "difflib", "inspect", "string", "typing")
FILE_SEPARATOR = b"\n\n\n"


def _read_license_dir(directory: str) -> list[bytes]:
    texts = []
    seen = set()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue  # GPL -> GPL-3 and the like: the target is read under its own name
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        with open(path, "rb") as f:
            texts.append(f.read())
    return texts


def _read_stdlib_sources() -> list[bytes]:
    texts = []
    for module in FALLBACK_MODULES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            continue
        with open(spec.origin, "rb") as f:
            texts.append(f.read())
    return texts


def load_corpus(path: Optional[str] = None) -> bytes:
    """The corpus as bytes: the file at `path`, or the license texts of /usr/share/common-licenses
    (sorted by name, symlinks skipped) joined by blank lines, or, where that directory is missing,
    the sources of a few standard-library modules."""
    if path is not None:
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            raise ValueError(f"corpus file {path} is empty")
        return data
    texts = _read_license_dir(LICENSE_DIR) if os.path.isdir(LICENSE_DIR) else []
    if not texts:
        texts = _read_stdlib_sources()
    if not texts:
        raise RuntimeError(f"no corpus: {LICENSE_DIR} is missing and no standard-library "
                           f"source of {', '.join(FALLBACK_MODULES)} was found; pass a path")
    return FILE_SEPARATOR.join(text.strip(b"\n") for text in texts)


def line_starts(corpus: bytes) -> list[int]:
    """Offsets where text lines begin: 0 and the first non-blank byte after each line break
    (blank lines and indentation are skipped, so paragraphs start at their first word)."""
    starts = [0]
    for match in re.finditer(rb"\n\s*", corpus):
        if match.end() < len(corpus):
            starts.append(match.end())
    return starts


class ByteSequenceDataset(torch.utils.data.Dataset):
    """Samples of the corpus as 1-D long tensors of byte values (0..255).

    Sample lengths are drawn, with `seed`, from a log-normal distribution of mean about
    `mean_len` (sigma `sigma`, heavy right tail) clipped to [min_len, max_len]. Each sample starts
    at the beginning of a line and takes `length` bytes from there; the next one starts at the
    first line beginning at or after its end, so samples do not overlap and cover most of the
    corpus. The same corpus and arguments give the same samples."""

    def __init__(self, corpus: bytes, max_len: int, min_len: int = 16, seed: int = 0,
                 mean_len: int = 256, sigma: float = 1.0):
        if not 1 <= min_len <= max_len:
            raise ValueError(f"need 1 <= min_len ({min_len}) <= max_len ({max_len})")
        if mean_len < 1:
            raise ValueError(f"mean_len {mean_len} is not positive")
        self.max_len, self.min_len, self.seed = int(max_len), int(min_len), int(seed)
        data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).to(torch.long)
        starts = line_starts(corpus)
        rng = random.Random(self.seed)
        mu = math.log(mean_len) - sigma * sigma / 2  # E[lognormal(mu, sigma)] = mean_len
        self._spans: list[tuple[int, int]] = []
        begin = 0
        while begin < len(corpus):
            drawn = int(round(rng.lognormvariate(mu, sigma)))
            length = min(max(drawn, self.min_len), self.max_len)
            end = min(begin + length, len(corpus))
            if end - begin >= self.min_len:
                self._spans.append((begin, end))
            following = bisect.bisect_left(starts, end)
            begin = starts[following] if following < len(starts) else len(corpus)
        if not self._spans:
            raise ValueError(f"the corpus ({len(corpus)} bytes) holds no sample of at least "
                             f"min_len {min_len} bytes")
        self._data = data

    def __len__(self) -> int:
        return len(self._spans)

    def __getitem__(self, index: int) -> torch.Tensor:
        begin, end = self._spans[index]
        return self._data[begin:end].clone()

    def lengths(self) -> list[int]:
        """Every sample's length, without building the samples."""
        return [end - begin for begin, end in self._spans]

    @staticmethod
    def decode(sample: torch.Tensor) -> str:
        return bytes(sample.to(torch.uint8).tolist()).decode("utf-8", errors="replace")
