"""Code in chat messages: fenced blocks as every platform sends them.

A block may have a language tag or not, and a newline after the opening fence or not:
Slack sends ```print(1)``` on one line, Discord and the console send ```python\\n...\\n```.
"""

from __future__ import annotations

import re
import unicodedata

from executor.run_scope import language_named

FENCE = re.compile(r"```(?P<first>[^\n`]*)(?P<newline>\n?)(?P<rest>.*?)```", re.DOTALL)
TAG = re.compile(r"[A-Za-z0-9_+#.-]{1,20}")
PYTHON_PREFIX = re.compile(r"(?:python3?|py)\s+", re.IGNORECASE)


def _code(found: re.Match[str]) -> str:
    first, rest = found["first"], found["rest"]
    if found["newline"]:
        # ```tag\n...```: the first line is a language tag (or empty); otherwise it is code.
        return rest if not first.strip() or TAG.fullmatch(first.strip()) else f"{first}\n{rest}"
    # ```...``` on one line: all of it is code, but for a leading "python " tag.
    return PYTHON_PREFIX.sub("", first, count=1) + rest


def fenced_blocks(text: str) -> list[str]:
    """The code of every fenced block in `text`, in order."""
    return [_code(found) for found in FENCE.finditer(text)]


def only_code(text: str) -> str | None:
    """The code of a message that is one fenced block and nothing else; else None."""
    found = FENCE.fullmatch(text.strip())
    return _code(found) if found else None


def first_tag(text: str) -> str:
    """The language tag of the first fenced block in `text` ("" when it has none)."""
    for found in FENCE.finditer(text):
        tag = found["first"].strip()
        return tag if found["newline"] and TAG.fullmatch(tag) else ""
    return ""


def known_tag(text: str) -> str:
    """The first fenced block's tag when it names a language Cellmate knows, else ""."""
    tag = first_tag(text)
    return tag if language_named(tag) is not None else ""


def with_language(flags: str, language: str) -> str:
    """A /run message's flags with `--lang` for a language other than Python."""
    return f"{flags} {LANG_FLAG} {language}" if language and language != "python" else flags


def fence_tag(text: str) -> str:
    """The language tag of a message that is one fenced block (```r\n...```), else ""."""
    found = FENCE.fullmatch(text.strip())
    if found is None or not found["newline"]:
        return ""
    tag = found["first"].strip()
    return tag if TAG.fullmatch(tag) else ""


LINE_END = re.compile(r"\r\n?")
KEPT = frozenset("\n\t")
HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
"""Control, format (zero-width, bidirectional), surrogate, private and unassigned characters,
and the line and paragraph separators: a client may draw them as nothing, as a line break
Python does not see (U+2028, NEL, form feed), or reorder the text around them."""


def as_run(code: str, language: str = "python") -> str:
    """Code as it is both shown (for approval, in the run's report) and run, so the two are
    the same lines: CRLF and a lone CR (which end a line for Python) become LF, and every
    character a client may not draw as Python reads it becomes its escape (`\\u2028`).

    Inside a string literal an escape has the same value as the character; anywhere else the
    character was not code Python runs (a comment, or a syntax error, which stays one). So
    it is in R, JavaScript and TypeScript; Bash reads no escape in its quotes, so its code
    only has its line ends made plain."""
    code = LINE_END.sub("\n", code)
    if language == "bash" or all(char.isprintable() or char in KEPT for char in code):
        return code
    return "".join(_escaped(char) for char in code)


def _escaped(char: str) -> str:
    if char in KEPT or unicodedata.category(char) not in HIDDEN:
        return char
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


BACKGROUND_FLAG = "--background"
"""After /run: the run goes to the background at once (`/run --background CODE`)."""
BESIDE_FLAG = "--beside"
"""After /run: code that would wait for a run in the background runs beside it, in a
second kernel (`/run --beside CODE`)."""


BOTH_FLAGS = (
    "Choose background or beside, not both: code run beside the background run does not go "
    "on in the background itself."
)


LANG_FLAG = "--lang"
"""After /run: the language of the code (`/run --lang r CODE`, or `--lang=r`)."""


def run_parts(text: str) -> tuple[set[str], str, str]:
    """The flags (`--background`, `--beside`) that start the text of a /run command, each a
    word of its own, the language `--lang` names ("" if none), and the code after them."""
    flags: set[str] = set()
    language = ""
    rest = text.strip()
    while parts := rest.split(maxsplit=1):
        word, after = parts[0], parts[1] if len(parts) > 1 else ""
        if word in (BACKGROUND_FLAG, BESIDE_FLAG):
            flags.add(word)
            rest = after
        elif word.startswith(LANG_FLAG + "="):
            language, rest = word.removeprefix(LANG_FLAG + "="), after
        elif word == LANG_FLAG and after:
            named = after.split(maxsplit=1)
            language, rest = named[0], named[1] if len(named) > 1 else ""
        else:
            break
    return flags, language, rest


def run_flags(text: str) -> tuple[set[str], str]:
    """The flags (`--background`, `--beside`) that start the text of a /run command, and
    the code after them (and after a `--lang`)."""
    flags, _, rest = run_parts(text)
    return flags, rest


def direct_language(text: str) -> str:
    """The language a direct run names: /run's `--lang`, else the fenced block's tag (of
    the message, or of /run's code); "" when it names none."""
    stripped = text.strip()
    if stripped.startswith("/run"):
        _, language, rest = run_parts(stripped.removeprefix("/run"))
        return language or fence_tag(rest)
    return fence_tag(stripped)


def runnable_again(code: str, language: str) -> str:
    """Code as Re-run (and a run a network door held back) sends it again through /run: in a
    block tagged with its language, unless it is Python."""
    named = language_named(language) or "python"
    return code if named == "python" else f"```{named}\n{code.rstrip()}\n```"


def direct_rerun(text: str) -> str | None:
    """What runs a direct message's code again (`runnable_again`); None if it has none."""
    language = language_named(direct_language(text) or "python") or "python"
    code = direct_code(text, language)
    return None if code is None else runnable_again(code, language)


def named_by_flag(text: str) -> bool:
    """Whether a /run message names its language with `--lang`."""
    stripped = text.strip()
    return stripped.startswith("/run") and bool(run_parts(stripped.removeprefix("/run"))[1])


def direct_code(text: str, language: str = "python") -> str | None:
    """The code of a message that is only a fenced code block, or `/run [--background]
    [--lang L] ...` (its code may be one fenced block), as it runs (`as_run`); else None."""
    stripped = text.strip()
    if stripped.startswith("/run"):
        _, _, rest = run_parts(stripped.removeprefix("/run"))
        code = (only_code(rest) if FENCE.fullmatch(rest.strip()) else rest) or None
    else:
        code = only_code(stripped)
    return None if code is None else as_run(code, language)


def background_asked(text: str) -> bool:
    """Whether a `/run` message asks for the background at once."""
    stripped = text.strip()
    return stripped.startswith("/run") and BACKGROUND_FLAG in run_flags(stripped[4:])[0]


def beside_asked(text: str) -> bool:
    """Whether a `/run` message asks to run beside a run in the background."""
    stripped = text.strip()
    return stripped.startswith("/run") and BESIDE_FLAG in run_flags(stripped[4:])[0]
