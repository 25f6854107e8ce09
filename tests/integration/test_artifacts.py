"""The artifact pipeline end to end: real sandbox, real storage (local files and Azurite)."""

from __future__ import annotations

import pytest

from bot.agent.run_outputs import artifact_sources
from executor import Executor, Status
from storage.artifacts import ArtifactLimits, ArtifactSource, publish
from storage.azure_blob import AzureBlobStorage
from storage.base import Storage
from tests.support.azurite import Azurite
from tests.support.links import fetch

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

CHART_AND_CSV = (
    "import matplotlib.pyplot as plt, pandas as pd\n"
    "df = pd.DataFrame({'month': [1, 2, 3], 'revenue': [10, 30, 20]})\n"
    "df.plot(x='month', y='revenue')\n"
    "plt.show()\n"
    "df.to_csv('revenue.csv', index=False)"
)


async def test_a_chart_and_a_csv_come_back_as_links_to_the_same_bytes(
    executor: Executor, storage: Storage
) -> None:
    result = await executor.session("artifacts").run(CHART_AND_CSV)
    assert result.status is Status.OK
    manifest = await publish(storage, "slack:T1:C1:1.2", artifact_sources(result))
    assert [(a.name, a.status, a.inline_image) for a in manifest] == [
        ("chart-1.png", "published", True),
        ("revenue.csv", "published", False),
    ]
    chart, table = manifest
    assert chart.link is not None
    assert table.link is not None
    got_chart, got_table = await fetch(chart.link), await fetch(table.link)
    assert got_chart.body == chart.content
    assert got_chart.body.startswith(b"\x89PNG")
    assert got_table.body == b"month,revenue\n1,10\n2,30\n3,20\n"
    assert got_table.headers["Content-Type"].startswith("text/csv")
    assert (table.name, table.size, table.status) == ("revenue.csv", 29, "published")
    # A follow-up that writes nothing publishes nothing again.
    again = await executor.session("artifacts").run("df['revenue'].sum()")
    assert artifact_sources(again) == []


async def test_active_content_from_code_is_a_download(executor: Executor, storage: Storage) -> None:
    result = await executor.session("active").run(
        "open('page.html', 'w').write('<script>alert(document.cookie)</script>')\n"
        "from IPython.display import SVG, display\n"
        'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>\'))'
    )
    manifest = await publish(storage, "c", artifact_sources(result))
    assert [(a.name, a.inline_image) for a in manifest] == [
        ("chart-1.svg", False),
        ("page.html", False),
    ]
    for item in manifest:
        assert item.link is not None
        got = await fetch(item.link)
        assert got.headers["Content-Disposition"].startswith("attachment")


async def test_many_files_empty_files_and_a_file_over_the_cap(
    executor: Executor, storage: Storage
) -> None:
    result = await executor.session("many").run(
        "for i in range(1000):\n"
        "    open(f'/mnt/data/f{i:04}.txt', 'w').write(str(i))\n"
        "open('/mnt/data/empty.txt', 'w').close()"
    )
    sources = artifact_sources(result)
    assert len(sources) == 100  # the executor returns at most 100 files from one run
    manifest = await publish(storage, "c", sources, ArtifactLimits(max_count=50))
    assert [a.status for a in manifest].count("published") == 50
    assert all(a.reason == "more than 50 files in one run" for a in manifest[50:])
    sized = await publish(
        storage,
        "c",
        [
            ArtifactSource("empty.txt", b"", "text/plain"),
            ArtifactSource("big.bin", b"x" * 2000, "application/octet-stream"),
        ],
        ArtifactLimits(max_bytes=1000),
    )
    assert [(a.name, a.status, a.reason) for a in sized] == [
        ("empty.txt", "published", ""),
        ("big.bin", "skipped", "larger than 0.001 MB"),
    ]


@pytest.mark.timeout(120)
async def test_storage_outage_mid_upload_lists_failures_and_crashes_nothing(
    executor: Executor,
) -> None:
    server = Azurite().start()
    storage = AzureBlobStorage(
        container="outage", connection_string=server.connection_string(), retries=1
    )
    try:
        await storage.check()
        result = await executor.session("outage").run(CHART_AND_CSV)
        sources = artifact_sources(result) * 6
        first = await publish(storage, "c", sources[:2])
        assert [a.status for a in first] == ["published", "published"]
        server.stop()
        manifest = await publish(storage, "c", sources)
        assert len(manifest) == 12
        assert {a.status for a in manifest} == {"failed"}
        assert all("did not answer" in a.reason for a in manifest)
    finally:
        await storage.close()
        server.close()
