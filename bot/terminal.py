"""Text made safe for a terminal: output and names that sandboxed code controls.

A terminal obeys control characters and escape sequences in what it prints: they can clear
the screen, retitle the window, write the clipboard (OSC 52), reset the terminal, move the
cursor to overwrite lines already shown, or reorder text (bidirectional overrides). Code in
the sandbox chooses its output and its file names, so everything shown in a terminal passes
through here first, and only printable text, newlines and tabs come out:

- escape sequences (CSI, OSC, DCS, SOS, PM, APC and the short ESC ones, in their 7-bit
  and 8-bit C1 forms) are removed whole;
- a carriage return that is not part of a line end starts a new line, so it cannot
  overwrite; other control characters are shown as their Unicode control pictures (␈, ␇);
- format characters (bidirectional overrides and isolates, zero-width characters) and
  lone surrogates are shown as visible escapes.

`TerminalText` does this for output that arrives in pieces: an escape sequence cut in two
by a chunk boundary is still recognised and removed. `show_name` shows a name (a file
name, a path) on one line, with every unusual character as a visible escape.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from enum import Enum

ESC = "\x1b"
BEL = "\x07"
C1_ST = "\x9c"
C1_CSI = "\x9b"
# DCS, SOS, OSC, PM and APC introduce a control string that runs to a terminator.
C1_STRINGS = frozenset("\x90\x98\x9d\x9e\x9f")
ESC_STRINGS = frozenset(["P", "X", "]", "^", "_"])
# Where a plain run of text ends and the state machine has to look closer.
SEQUENCE_START = re.compile("[\x1b\x80-\x9f]")
CSI_BODY = re.compile("[\x20-\x3f]*")
STRING_BODY = re.compile("[^\x07\x1b\x9c\n]*")
# Control characters left after sequences are removed are shown as control pictures
# (U+2400 + code; DEL is U+2421), which are printable and one column wide.
PICTURES = {code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"}
PICTURES[0x7F] = "\u2421"
UNSHOWN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Names are stricter: a character unassigned in this Python's Unicode data may be a newer
# format character, and a name has no need of it.
UNSHOWN_IN_NAMES = UNSHOWN_CATEGORIES | {"Cn"}
# Surrogates U+DC80..U+DCFF stand for undecodable bytes (Python's surrogateescape); they
# alone are shown as `\\xNN` above 0x7f, so a byte and a character never look the same.
ESCAPED_BYTES = range(0xDC80, 0xDD00)
NAME_ESCAPES = {"\r": "\\r"}


class _State(Enum):
    TEXT = "text"
    ESCAPE = "escape"  # after ESC
    ESCAPE_INTERMEDIATE = "escape-intermediate"  # after ESC and 0x20..0x2f
    CSI = "csi"
    STRING = "string"  # inside a DCS/SOS/OSC/PM/APC string
    STRING_ESCAPE = "string-escape"  # ESC inside a string: ST if a backslash follows


@functools.cache
def _unshown(categories: frozenset[str] = UNSHOWN_CATEGORIES) -> re.Pattern[str]:
    """Every character of these categories, other than `\\n` and `\\t`."""
    ranges: list[str] = []
    start = None
    for code in range(sys.maxunicode + 2):
        hidden = (
            code <= sys.maxunicode
            and chr(code) not in "\n\t"
            and unicodedata.category(chr(code)) in categories
        )
        if hidden and start is None:
            start = code
        elif not hidden and start is not None:
            ranges.append(f"{_class_char(start)}-{_class_char(code - 1)}")
            start = None
    return re.compile(f"[{''.join(ranges)}]")


def _class_char(code: int) -> str:
    return f"\\U{code:08x}"


def _escape(character: str) -> str:
    code = ord(character)
    if code in ESCAPED_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _skip(pattern: re.Pattern[str], text: str, index: int) -> int:
    found = pattern.match(text, index)
    return found.end() if found else index


def _plain(text: str) -> str:
    """A run of text without escape sequences, made printable."""
    return _unshown().sub(
        lambda match: PICTURES.get(ord(match.group()), "") or _escape(match.group()), text
    )


class TerminalText:
    """Cleans text that arrives in chunks, as if it were cleaned in one piece.

    `feed` returns what can be shown now; a sequence begun at the end of a chunk is
    remembered and removed when the rest arrives. `finish` ends the text: a sequence left
    open is dropped. A control string (such as OSC) with no terminator ends at the end of
    its line, so it can hide at most the rest of that line.
    """

    def __init__(self) -> None:
        self._state = _State.TEXT
        self._carriage_return = False

    def feed(self, text: str) -> str:
        shown: list[str] = []
        index, end = 0, len(text)
        while index < end:
            state = self._state
            if state is _State.TEXT:
                found = SEQUENCE_START.search(text, index)
                stop = found.start() if found else end
                if stop > index:
                    shown.append(self._lines(text[index:stop]))
                if found is None:
                    break
                self._begin(text[stop])
                index = stop + 1
            elif state is _State.CSI:
                index = _skip(CSI_BODY, text, index)
                if index < end:
                    # A final byte completes the sequence; anything else cuts it short and
                    # is itself read as text (or as the start of a new sequence).
                    if "\x40" <= text[index] <= "\x7e":
                        index += 1
                    self._state = _State.TEXT
            elif state is _State.STRING:
                index = _skip(STRING_BODY, text, index)
                if index < end:
                    character = text[index]
                    if character == ESC:
                        self._state = _State.STRING_ESCAPE
                        index += 1
                    else:
                        # BEL and ST end the string; a newline ends it but is kept.
                        self._state = _State.TEXT
                        index += character != "\n"
            elif state is _State.STRING_ESCAPE:
                if text[index] == "\\":
                    self._state = _State.TEXT
                    index += 1
                else:
                    # ESC without a backslash abandons the string and starts a new sequence.
                    self._state = _State.ESCAPE
            else:
                index = self._escape_sequence(text[index], index)
        return "".join(shown)

    def finish(self) -> str:
        """The end of the text: whatever is still held back, shown or dropped."""
        self._state = _State.TEXT
        shown = "\n" if self._carriage_return else ""
        self._carriage_return = False
        return shown

    def _begin(self, character: str) -> None:
        if character == ESC:
            self._state = _State.ESCAPE
        elif character == C1_CSI:
            self._state = _State.CSI
        elif character in C1_STRINGS:
            self._state = _State.STRING
        # Other C1 controls (NEL, IND, ST on its own ...) are dropped.

    def _escape_sequence(self, character: str, index: int) -> int:
        """One character after ESC; returns where to read on."""
        intermediate = "\x20" <= character <= "\x2f"
        if self._state is _State.ESCAPE and character == "[":
            self._state = _State.CSI
        elif self._state is _State.ESCAPE and character in ESC_STRINGS:
            self._state = _State.STRING
        elif intermediate:
            self._state = _State.ESCAPE_INTERMEDIATE
        elif "\x30" <= character <= "\x7e":
            self._state = _State.TEXT  # a complete short sequence, such as ESC c (RIS)
        elif character == ESC:
            self._state = _State.ESCAPE  # the first ESC led nowhere
        else:
            # Not a sequence: the lone ESC is dropped and the character read as text.
            self._state = _State.TEXT
            return index
        return index + 1

    def _lines(self, text: str) -> str:
        """Carriage returns as line ends, so nothing shown can be overwritten."""
        if self._carriage_return:
            text = "\r" + text
            self._carriage_return = False
        if text.endswith("\r"):
            # Whether it ends a line ("\r\n") shows only with the next chunk.
            self._carriage_return = True
            text = text[:-1]
        return _plain(text.replace("\r\n", "\n").replace("\r", "\n"))


def clean(text: str) -> str:
    """`text` as a terminal may show it: printable characters, newlines and tabs only."""
    stream = TerminalText()
    return stream.feed(text) + stream.finish()


def show_name(name: str) -> str:
    """A name (file name, path) on one line: control, format and undecodable characters
    as visible escapes (`\\n`, `\\x1b`, `\\xff`, `\\u202e`), backslashes doubled."""
    name = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return _unshown(UNSHOWN_IN_NAMES).sub(
        lambda match: NAME_ESCAPES.get(match.group()) or _escape(match.group()), name
    )
