"""What several platform tests share: sample data, the environment for a `cellmate`
process, and how many turns a bot's messages answer."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.sandboxes import TEST_INSTANCE

SALES = b"month,sales\n1,10\n2,30\n3,20\n"
CHART_CODE = (
    "import pandas as pd, matplotlib.pyplot as plt\n"
    "df = pd.read_csv('/mnt/data/sales.csv')\n"
    "df.plot(x='month', y='sales')\n"
    "plt.show()\n"
)
PNG = b"\x89PNG\r\n\x1a\n"
SETTING_PREFIXES = ("OPENAI_", "AZURE_", "CELLMATE_", "DISCORD_", "SLACK_")


def cli_environment(data: Path, instance: str = TEST_INSTANCE, **extra: str) -> dict[str, str]:
    """This process's environment without any Cellmate, model or platform setting, plus
    `extra`: a `cellmate` process sees only what the test gives it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}
    return {**base, "CELLMATE_DATA_DIR": str(data), "CELLMATE_INSTANCE": instance, **extra}


def turns_ended(messages: list[tuple[str, bool]], report: str) -> int:
    """How many turns these bot messages (text, and whether it has a Re-run button; in
    order, file uploads left out) answer: each answer, and each finished direct run, whose
    report (starting with `report`, with Re-run) is its whole answer."""
    return sum(
        1
        for text, rerun in messages
        if "⏳" not in text and ":hourglass" not in text and (rerun or not text.startswith(report))
    )
