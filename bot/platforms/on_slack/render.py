"""What Slack shows for a turn: the progress message (blocks with a button) and the answer.

Pure functions of a `TurnView`. A section block holds at most 3,000 characters; messages
are kept under 2,900 so that any of them fits in a section. Everything is escaped for Slack.
"""

from __future__ import annotations

from typing import Any

from bot.platforms.markup import break_fences, head, split_message, tail
from bot.platforms.on_slack.mrkdwn import escape, slack_code, to_mrkdwn
from bot.platforms.progress import (
    TurnView,
    extra_files,
    fit_notices,
    fit_progress,
    link_line,
    shown_artifacts,
    status_line,
)
from storage.artifacts import Artifact

SECTION_LIMIT = 3000
MESSAGE_LIMIT = 2900
CODE_SHOWN = 1200
OUTPUT_SHOWN = 1200
NOTICES_ROOM = MESSAGE_LIMIT - 100
"""All of an answer's notices together: one message at most."""
MARKS = {
    "waiting": ":hourglass_flowing_sand:",
    "thinking": ":hourglass_flowing_sand:",
    "writing": ":writing_hand:",
    "approval": ":lock:",
    "failed": ":x:",
    "notice": ":information_source:",
}
"""The mark before each kind of status line (`TurnView.doing`) and answer line."""


def progress_text(view: TurnView, draft: bool = True) -> str:
    """The progress message; without the model's `draft` when its words are shown
    elsewhere (streamed into a message of their own)."""
    return fit_progress(
        lambda code, output: _progress(view, code, output, draft),
        CODE_SHOWN,
        OUTPUT_SHOWN,
        SECTION_LIMIT - 100,
        SECTION_LIMIT - 140,
    )


def _progress(view: TurnView, code_room: int, output_room: int, draft: bool = True) -> str:
    run = view.current
    thinking = status_line(view, MARKS, lambda draft: to_mrkdwn(tail(draft, 2 * output_room)))
    doing = view.doing()
    if not draft and doing is not None and doing.kind == "writing":
        thinking = f"{MARKS['writing']} {doing.text}"
    if run is None:
        return thinking
    count = len(view.runs)
    title = "*Code*" if count == 1 else f"*Code* (run {count}; all runs are attached at the end)"
    parts = [title, slack_code(head(run.code, code_room))]
    if run.text.strip():
        parts.append(slack_code(tail(run.text, output_room)))
    parts.append(plain(run.summary()))
    if run.status is not None and not view.done:
        parts.append(thinking)
    return "\n".join(parts)


STYLES = {"cm_stop": "danger", "cm_beside": "primary"}
"""The buttons that stand out: Stop, and Run beside while code waits for a background run."""


def blocks(text: str, buttons: list[tuple[str, str, str]] | None = None) -> list[dict[str, Any]]:
    """A section with `text`, and buttons given as (action_id, label, value)."""
    shown: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text or " "}}
    ]
    if buttons:
        shown.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": action,
                        "text": {"type": "plain_text", "text": label},
                        "value": value,
                        **({"style": STYLES[action]} if action in STYLES else {}),
                    }
                    for action, label, value in buttons
                ],
            }
        )
    return shown


def answer_texts(view: TurnView, not_uploaded: list[Artifact], max_files: int = 10) -> list[str]:
    """The answer in mrkdwn, split to fit, listing artifacts that were not uploaded and
    counting those beyond `max_files`."""
    lines = notice_lines(view)
    ending = view.ending()
    if ending is not None and ending.failed:
        lines.append(f"{MARKS['failed']} {escape(ending.text)}")
    elif ending is not None:
        lines.append(to_mrkdwn(ending.text))
    lines += file_lines(view, not_uploaded, max_files)
    return split_message("\n".join(lines), MESSAGE_LIMIT)


def notice_lines(view: TurnView) -> list[str]:
    """The answer's notices, one message's worth at most."""
    return fit_notices(
        view.notices, NOTICES_ROOM, lambda notice: f"{MARKS['notice']} {plain(notice)}"
    )


def file_lines(view: TurnView, not_uploaded: list[Artifact], max_files: int) -> list[str]:
    """The lines after an answer: artifacts that were not uploaded, and those not shown."""
    lines: list[str] = []
    if not_uploaded:
        lines.append("")
        lines += [
            link_line(a, "📎 <{link}|{name}> ({size})") if a.link else escape(link_line(a, ""))
            for a in not_uploaded
        ]
    _, hidden = shown_artifacts(view, max_files)
    if hidden:
        lines += ["", f"{MARKS['notice']} {escape(hidden)}"]
    return lines


def plain(text: str) -> str:
    """Our own words with names and reasons in them (a notice) made safe for Slack: `<`,
    `>` and `&` escaped, so `<!channel>` or `<@U1>` in a name pings nobody and links nothing,
    and runs of backticks broken, so a name cannot open a code block."""
    return break_fences(escape(text))


def uploads(view: TurnView, max_files: int = 10) -> tuple[list[tuple[str, bytes]], list[Artifact]]:
    """Files to upload into the thread (charts and files, at most `max_files`; long code and
    output), and the artifacts shown that have no bytes to upload (too large, or not kept)."""
    shown, _ = shown_artifacts(view, max_files)
    files = [(a.name, a.content) for a in shown if a.content is not None]
    missing = [a for a in shown if a.content is None]
    return extra_files(view, CODE_SHOWN, OUTPUT_SHOWN) + files, missing
