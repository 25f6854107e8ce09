"""Counting the tokens of chat messages, offline.

OpenAI model names are counted with tiktoken and the model's own encoding. tiktoken
downloads its BPE files on first use, which a bot without internet access cannot do, so
the files come from the `bpe-openai` package (which ships them) and are checked against
the SHA-256 that tiktoken itself expects before use. Other models (Llama, Qwen, Mistral
behind Ollama or vLLM) have tokenizers of their own: they are counted with `o200k_base`
and the count is marked approximate; modern tokenizers of this size land within about
20% of it. Without the encoding files at all, four bytes of UTF-8 count as one token.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
import hashlib
import importlib.metadata
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken
import tiktoken.model

MESSAGE_OVERHEAD = 3
"""Tokens each chat message costs beyond its content (OpenAI's published accounting)."""
REPLY_PRIMING = 3
"""Tokens every request spends priming the reply."""
FALLBACK = "o200k_base"
ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
    r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True, slots=True)
class Shipped:
    """An encoding as tiktoken defines it (tiktoken_ext/openai_public.py)."""

    sha256: str
    pattern: str
    special: dict[str, int]


ENCODINGS = {
    "cl100k_base": Shipped(
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": Shipped(
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}


class EncodingUnavailable(RuntimeError):
    """The encoding's BPE file is not installed, or is not the one tiktoken expects."""


def bpe_file(name: str) -> bytes:
    """The encoding's BPE ranks file, as tiktoken would download it, checked."""
    shipped = ENCODINGS[name]
    try:
        dist = importlib.metadata.distribution("bpe-openai")
        packed = Path(str(dist.locate_file(f"bpe_openai/data/{name}.tiktoken.gz"))).read_bytes()
    except (importlib.metadata.PackageNotFoundError, OSError) as exc:
        raise EncodingUnavailable(f"{name}: the bpe-openai package is not installed") from exc
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != shipped.sha256:
        raise EncodingUnavailable(f"{name}: the shipped file is not the one tiktoken expects")
    return data


@functools.cache
def encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding built from the shipped file (raises EncodingUnavailable)."""
    ranks = {}
    for line in bpe_file(name).splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    shipped = ENCODINGS[name]
    return tiktoken.Encoding(
        name, pat_str=shipped.pattern, mergeable_ranks=ranks, special_tokens=shipped.special
    )


@dataclass(frozen=True, slots=True)
class Counter:
    """Counts tokens the way `model` does (exactly), or approximately."""

    model: str
    encoding_name: str
    exact: bool

    @classmethod
    def for_model(cls, model: str) -> Counter:
        try:
            name = tiktoken.model.encoding_name_for_model(model)
        except KeyError:
            return cls(model, FALLBACK, exact=False)
        if name not in ENCODINGS:  # legacy completion models: not chat models
            return cls(model, FALLBACK, exact=False)
        return cls(model, name, exact=True)

    def describe(self) -> str:
        """How counting works, for `cellmate doctor`."""
        if not self.available:
            return "approximately (4 bytes a token: the tokenizer files are not installed)"
        if self.exact:
            return f"with tiktoken ({self.encoding_name})"
        return f"approximately (tiktoken {self.encoding_name}; {self.model} is not an OpenAI model)"

    def load(self) -> None:
        """Build the encoding now (a fraction of a second, once per process): call it in a
        thread so that the first count does not hold up the event loop."""
        with contextlib.suppress(EncodingUnavailable):
            encoding(self.encoding_name)

    @property
    def available(self) -> bool:
        try:
            encoding(self.encoding_name)
        except EncodingUnavailable:
            return False
        return True

    def text(self, text: str) -> int:
        try:
            chosen = encoding(self.encoding_name)
        except EncodingUnavailable:
            return math.ceil(len(text.encode()) / 4)
        # Special-token text in a message is ordinary text to count, never a control token.
        return len(chosen.encode(text, disallowed_special=()))

    def message(self, message: dict[str, Any]) -> int:
        """One chat message in the OpenAI wire format (content parts and tool calls too)."""
        used = MESSAGE_OVERHEAD + self.text(str(message.get("role", "")))
        content = message.get("content")
        if isinstance(content, str):
            used += self.text(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                # An image costs its own tokens; history never keeps images, this is a guess.
                used += self.text(text) if isinstance(text, str) else 85
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            used += self.text(str(function.get("name", "")))
            used += self.text(str(function.get("arguments", "")))
        if message.get("tool_call_id"):
            used += self.text(str(message["tool_call_id"]))
        return used

    def messages(self, messages: list[dict[str, Any]]) -> int:
        return sum(self.message(m) for m in messages) + REPLY_PRIMING
