"""Chat attachments land in a live session's /mnt/data, with schema previews for tables."""

from __future__ import annotations

import pytest

from executor import Executor, Status
from storage.intake import IncomingFile, receive

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]


async def excel_bytes(executor: Executor) -> bytes:
    """A real .xlsx, made where pandas and openpyxl are: in a sandbox."""
    made = await executor.run_notebook(
        "import pandas as pd\n"
        "frame = pd.DataFrame({'region': ['north', 'south'], 'units': [3, 5]})\n"
        "frame.to_excel('r.xlsx', index=False)"
    )
    return made.files[0].content


async def test_attachments_reach_the_session_with_previews(executor: Executor) -> None:
    workbook = await excel_bytes(executor)
    intake = await receive(
        [
            IncomingFile("sales 2025.csv", None, b"month,revenue\n1,10.5\n2,30\n"),
            IncomingFile("regions.xlsx", None, workbook),
            IncomingFile("notes.txt", None, b"plain text"),
            IncomingFile("broken.json", None, b"{not json"),
        ]
    )
    session = executor.session("attachments")
    await session.put_files(intake.files)
    previews = await session.preview(intake.tabular)
    assert sorted(previews) == ["broken.json", "regions.xlsx", "sales-2025.csv"]
    assert previews["sales-2025.csv"].startswith(
        "sales-2025.csv: 2 rows, 2 columns: month (int64), revenue (float64)"
    )
    assert "north" in previews["regions.xlsx"]
    assert "could not be read as a table" in previews["broken.json"]
    result = await session.run(
        "import pandas as pd\n"
        "revenue = pd.read_csv('sales-2025.csv')['revenue'].sum()\n"
        "print(revenue, pd.read_excel('regions.xlsx')['units'].sum())\n"
        "print(open('notes.txt').read())"
    )
    assert result.status is Status.OK
    assert result.stdout == "40.5 8\nplain text\n"
    # The preview ran beside the kernel, not in it: the user's namespace is untouched.
    untouched = await session.run(
        "sorted(n for n in globals() if n in ('previews', 'read', 'ROWS'))"
    )
    assert untouched.results[-1].text == "[]"
