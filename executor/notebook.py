"""Notebook mode: cells run once in a sandbox no one used before, destroyed afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from executor.archive import ExtractedFiles, OutputCaps, build_input_tar
from executor.limits import SandboxLimits
from executor.models import ExecutionResult, SkippedFile
from executor.pool import SandboxPool
from executor.run import OutputCallback, execute, judge, new_collector, truncation_note

MB = 1_000_000


async def run_notebook(
    pool: SandboxPool,
    cells: Sequence[str],
    limits: SandboxLimits,
    files: Mapping[str, bytes] | None = None,
    on_output: OutputCallback | None = None,
    stop: asyncio.Event | None = None,
) -> ExecutionResult:
    files = dict(files or {})
    input_tar = build_input_tar(
        files, limits.max_input_files, limits.max_input_total_mb * MB, limits.uid, limits.gid
    )
    if limits.container_spec() == pool.limits.container_spec():
        lease = await pool.acquire()
    else:
        lease = await pool.acquire_custom(limits)
    sandbox = lease.sandbox
    try:
        if input_tar:
            await sandbox.put_files(input_tar)
        collector = new_collector(limits)
        outcome = await execute(
            sandbox, cells, limits, collector, on_output=on_output, stop=stop, want_notebook=True
        )
        exit_state = await sandbox.exit_state()
        extracted = await sandbox.get_files(output_caps(limits), files)
        status, message = judge(outcome, exit_state.oom_killed, exit_state.exit_code, limits)
        truncated = outcome.truncated or collector.truncated
        dropped = outcome.dropped_results + collector.dropped
        return collector.result(
            status,
            truncation_note(message, truncated, limits, dropped),
            files=tuple(extracted.files),
            skipped_files=tuple(skipped_notes(extracted, limits)),
            notebook=outcome.notebook,
            output_truncated=truncated,
            dropped_results=dropped,
            execution_count=outcome.execution_count,
            duration_ms=outcome.duration_ms,
            startup_ms=lease.startup_ms,
            runtime=limits.runtime,
        )
    finally:
        pool.release(sandbox)


def output_caps(limits: SandboxLimits) -> OutputCaps:
    return OutputCaps(
        max_files=limits.max_output_files,
        max_file_bytes=limits.max_output_file_mb * MB,
        max_total_bytes=limits.max_output_total_mb * MB,
        max_depth=limits.max_output_depth,
    )


def skipped_notes(extracted: ExtractedFiles, limits: SandboxLimits) -> list[SkippedFile]:
    """What did not come back, with one line each for whatever was too many to list."""
    skipped = list(extracted.skipped)
    if extracted.over_count:
        skipped.append(over_count_note(extracted.over_count, limits))
    if extracted.not_listed:
        skipped.append(
            SkippedFile(path="…", reason=f"{extracted.not_listed:,} more entries refused")
        )
    return skipped


def over_count_note(count: int, limits: SandboxLimits) -> SkippedFile:
    return SkippedFile(
        path="…",
        reason=f"{count:,} more files not returned: at most "
        f"{limits.max_output_files} output files come back from one run",
    )
