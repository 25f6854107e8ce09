"""Token counts: tiktoken with the encodings the `bpe-openai` package ships (offline),
proven the same as tiktoken's own files, and the settings of the history budget."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tiktoken
import tiktoken.registry

from bot.agent.tokens import ENCODINGS, Counter, bpe_file, encoding
from bot.settings import SettingsError, load_settings

SAMPLES = [
    "Plot revenue by month from sales.csv, then fit a linear trend.",
    "df = pd.read_csv('/mnt/data/sales.csv')\nprint(df.describe())\n\n\n",
    "Größe: 12 µm — 東京 データ 😀 <|endoftext|> don't WON'T 1234567",
]


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_the_shipped_encodings_are_tiktokens_own(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tiktoken's own loader, reading its cache (keyed by the URL it would download from)
    # and checking its own SHA-256, must build the same encoding as ours.
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(bpe_file(name))  # noqa: S324
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, name, raising=False)
    theirs = tiktoken.get_encoding(name)
    ours = encoding(name)
    for sample in SAMPLES:
        assert ours.encode(sample, disallowed_special=()) == theirs.encode(
            sample, disallowed_special=()
        )
    assert ours.n_vocab == theirs.n_vocab
    assert ours.special_tokens_set == theirs.special_tokens_set


def test_openai_models_are_counted_exactly_and_others_approximately() -> None:
    assert Counter.for_model("gpt-4o-mini") == Counter("gpt-4o-mini", "o200k_base", exact=True)
    assert Counter.for_model("gpt-4").encoding_name == "cl100k_base"
    local = Counter.for_model("llama3.1:8b")
    assert not local.exact
    assert local.describe() == (
        "approximately (tiktoken o200k_base; llama3.1:8b is not an OpenAI model)"
    )
    assert Counter.for_model("gpt-4o").describe() == "with tiktoken (o200k_base)"
    assert Counter.for_model("gpt-4o").text("hello world") == 2


def test_a_message_counts_its_content_and_its_tool_calls() -> None:
    counter = Counter.for_model("gpt-4o")
    code = "import pandas as pd\n" * 20
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "python", "arguments": code}}
        ],
    }
    bare = {"role": "assistant", "content": ""}
    assert counter.message(call) >= counter.message(bare) + counter.text(code)
    assert counter.messages([bare, bare]) == 2 * counter.message(bare) + 3


def test_the_history_budget_and_streaming_are_settings(tmp_path: Path) -> None:
    chosen = load_settings(
        {"CELLMATE_HISTORY_TOKENS": "4000", "CELLMATE_LLM_STREAM": "false"}, env_file=None
    )
    assert chosen.model.history_tokens == 4000
    assert chosen.model.stream is False
    defaults = load_settings({}, env_file=None).model
    assert (defaults.history_tokens, defaults.stream) == (16_000, True)
    with pytest.raises(SettingsError, match="history_tokens must be at least 1000"):
        load_settings({"CELLMATE_HISTORY_TOKENS": "10"}, env_file=None)
