"""What a terminal is given to show: no sequence or control character survives, in one
piece or split across chunks, and names stay on one visible line."""

from __future__ import annotations

import itertools
import os
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.terminal import TerminalText, clean, show_name

# One of each kind of sequence a terminal acts on, in 7-bit and 8-bit (C1) forms.
SEQUENCES = {
    "CSI clear screen": "\x1b[2J",
    "CSI with parameters": "\x1b[38;2;255;0;0m",
    "CSI private marker": "\x1b[?1049h",
    "CSI other private marker": "\x1b[>0c",
    "CSI with intermediate": "\x1b[1 q",
    "CSI cursor up": "\x1b[A",
    "8-bit CSI": "\x9b2J",
    "8-bit CSI with private marker": "\x9b?25l",
    "OSC title ended by BEL": "\x1b]0;pwned\x07",
    "OSC title ended by ST": "\x1b]2;pwned\x1b\\",
    "OSC 52 clipboard write": "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07",
    "OSC 8 hyperlink": "\x1b]8;;https://evil.example\x1b\\",
    "8-bit OSC ended by 8-bit ST": "\x9d0;pwned\x9c",
    "DCS": "\x1bP1$r0m\x1b\\",
    "8-bit DCS sixel": "\x90q#0;2;0;0;0#0~~\x9c",
    "APC kitty graphics": "\x1b_Gf=100,a=T;iVBORw0KGgo=\x1b\\",
    "8-bit APC": "\x9fapc\x9c",
    "PM": "\x1b^private\x1b\\",
    "8-bit PM": "\x9eprivate\x9c",
    "SOS": "\x1bXstring\x1b\\",
    "8-bit SOS": "\x98string\x9c",
    "RIS full reset": "\x1bc",
    "save cursor": "\x1b7",
    "index": "\x1bD",
    "character set": "\x1b(0",
    "screen alignment test": "\x1b#8",
    "keypad mode": "\x1b=",
    "8-bit NEL": "\x85",
    "8-bit IND": "\x84",
    "8-bit RI": "\x8d",
    "lone 8-bit ST": "\x9c",
}
FORMAT_CHARACTERS = {
    "right-to-left override": "\u202e",
    "left-to-right embedding": "\u202a",
    "first strong isolate": "\u2068",
    "pop directional isolate": "\u2069",
    "right-to-left mark": "\u200f",
    "arabic letter mark": "\u061c",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
}


def assert_terminal_safe(shown: str) -> None:
    """Only printable characters, newlines and tabs: nothing a terminal would act on."""
    for character in shown:
        category = unicodedata.category(character)
        assert character in "\n\t" or category[0] != "C" or category == "Co", repr(character)
        assert category not in ("Zl", "Zp"), repr(character)
    shown.encode("utf-8")  # writable to any UTF-8 terminal: no lone surrogates


@pytest.mark.parametrize("sequence", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_every_kind_of_sequence_is_removed_whole(sequence: str) -> None:
    assert clean(f"before{sequence}after\n") == "beforeafter\n"


@pytest.mark.parametrize("sequence", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_a_sequence_split_at_any_point_is_still_removed(sequence: str) -> None:
    text = f"before{sequence}after\n"
    for cut in range(len(text) + 1):
        stream = TerminalText()
        shown = stream.feed(text[:cut]) + stream.feed(text[cut:]) + stream.finish()
        assert shown == "beforeafter\n", f"cut at {cut}"


def test_a_sequence_fed_one_character_at_a_time_is_removed() -> None:
    text = "".join(f"{name}:{sequence}|" for name, sequence in SEQUENCES.items())
    stream = TerminalText()
    shown = "".join(stream.feed(character) for character in text) + stream.finish()
    assert shown == clean(text)
    assert shown == "".join(f"{name}:|" for name in SEQUENCES)


def test_an_escape_that_starts_no_sequence_is_dropped_and_the_text_kept() -> None:
    assert clean("abc\x1b") == "abc"
    assert clean("a\x1b\nb") == "a\nb"
    assert clean("a\x1b\x1b[2Jb") == "ab"
    assert clean("a\x1bé") == "aé"


def test_a_broken_sequence_cannot_swallow_the_text_after_it() -> None:
    # A CSI cut short by a newline, and a control string nobody ended, hide at most the
    # rest of their line.
    assert clean("a\x1b[12\nvisible") == "a\nvisible"
    assert clean("a\x1b]0;title never ended\nvisible\n") == "a\nvisible\n"
    # ESC inside a control string ends it and starts a sequence of its own.
    assert clean("a\x1b]0;title\x1b[2Jb") == "ab"


def test_carriage_return_cannot_overwrite_what_was_shown() -> None:
    shown = clean("rm -rf / # harmless\rls")
    assert "\r" not in shown
    assert shown == "rm -rf / # harmless\nls"
    assert clean("line\r\nnext\r\n") == "line\nnext\n"
    assert clean("10%\r50%\r100%\n") == "10%\n50%\n100%\n"


def test_carriage_return_at_a_chunk_boundary_is_one_line_end() -> None:
    stream = TerminalText()
    shown = stream.feed("line\r") + stream.feed("\nnext\r") + stream.finish()
    assert shown == "line\nnext\n"


def test_backspace_and_other_controls_are_shown_not_obeyed() -> None:
    shown = clean("password\b\b\b\b\b\b\b\bXXXXXXXX\x07\x00\x0b\x0c\x7f\n")
    assert shown == "password␈␈␈␈␈␈␈␈XXXXXXXX␇␀␋␌␡\n"
    assert clean("tab\tand newline\n") == "tab\tand newline\n"


@pytest.mark.parametrize("character", FORMAT_CHARACTERS.values(), ids=FORMAT_CHARACTERS.keys())
def test_format_characters_are_shown_as_escapes(character: str) -> None:
    shown = clean(f"access = 'user{character}'  # admin")
    assert character not in shown
    assert f"\\u{ord(character):04x}" in shown
    assert_terminal_safe(shown)


def test_undecodable_bytes_are_shown_as_their_values() -> None:
    assert clean(os.fsdecode(b"caf\xe9\n")) == "caf\\xe9\n"


def test_ordinary_text_passes_unchanged() -> None:
    text = "Résumé: 東京 ✓ 40 %, emoji 🎉, tabs\tand lines\n"
    assert clean(text) == text


HOSTILE = st.text(
    alphabet=st.sampled_from(
        [
            *"ab \n\t\r\b\x07\x00\x7f[]P^_X\\;?0123mJc@~",
            *"\x1b\x9b\x9c\x9d\x90\x85\u202e\u200b\udcffé",
        ]
    ),
    max_size=60,
)


@given(text=HOSTILE, cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=4))
def test_any_text_in_any_chunks_is_safe_and_cleaned_as_one_piece(
    text: str, cuts: list[int]
) -> None:
    bounds = sorted({0, len(text), *(min(cut, len(text)) for cut in cuts)})
    stream = TerminalText()
    shown = "".join(stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    shown += stream.finish()
    assert shown == clean(text)
    assert_terminal_safe(shown)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("report.csv", "report.csv"),
        ("x\n✓ ok in 0.1 s", "x\\n✓ ok in 0.1 s"),
        ("title\x1b]0;pwned\x07.txt", "title\\x1b]0;pwned\\x07.txt"),
        ("clear\x1b[2J.csv", "clear\\x1b[2J.csv"),
        ("over\rwrite\tand\bback", "over\\rwrite\\tand\\x08back"),
        ("csi\x9b2J", "csi\\u009b2J"),
        (os.fsdecode(b"bad\xff\xfe.csv"), "bad\\xff\\xfe.csv"),
        ("invoice\u202efdp.exe", "invoice\\u202efdp.exe"),
        ("back\\slash\\n", "back\\\\slash\\\\n"),
        ("données/東京.csv", "données/東京.csv"),
    ],
)
def test_names_are_one_visible_line(name: str, shown: str) -> None:
    assert show_name(name) == shown
    assert_terminal_safe(show_name(name))
    assert "\n" not in show_name(name)


def test_different_names_are_shown_differently() -> None:
    names = ["a\nb", "a\\nb", "a\\\nb", os.fsdecode(b"a\x9bb"), "a\x9bb", "a\\x9bb", "a\x1bb"]
    assert len({show_name(name) for name in names}) == len(names)


@given(st.text())
def test_any_name_is_one_safe_line(name: str) -> None:
    shown = show_name(name)
    assert "\n" not in shown
    assert "\t" not in shown
    assert_terminal_safe(shown)
