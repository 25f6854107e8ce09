"""Code that writes half a line into every descriptor of the runner's it can reach (not its
stdin), so that the runner's next message arrives broken; and what the user must be told."""

from __future__ import annotations

from bot.sandbox_words import spoken
from executor import Session, Status

BREAKER = """
import os
stdin = os.readlink('/proc/1/fd/0') if os.path.exists('/proc/1/fd/0') else None
reached = 0
for fd in range(1, 64):
    try:
        target = os.readlink(f'/proc/1/fd/{fd}')
        if target == stdin or not target.startswith(('pipe:', 'host:')):  # host: gVisor's
            continue
        out = os.open(f'/proc/1/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    os.write(out, b'half a line, without its end ')  # the runner's next line follows it
    reached += 1
print('reached', reached)
"""


async def breaks_the_runners_messages(session: Session) -> None:
    """Where the runtime lets code reach the runner's descriptors, the run that broke a
    message says so and the next one starts a new session that says why; elsewhere the
    code reaches none and the session carries on."""
    assert (await session.run("kept = 1")).status is Status.OK
    broke = spoken(await session.run(BREAKER))
    if broke.status is Status.OK:
        assert broke.stdout == "reached 0\n", broke.stdout
        assert (await session.run("kept")).results[-1].text == "1"
        return
    assert broke.status is Status.KILLED, broke.message
    assert broke.message.startswith("Part of this run's output may be missing"), broke.message
    after = spoken(await session.run("1 + 1"))
    assert after.session_restarted
    assert "broke the runner's messages" in after.message, after.message
    assert (after.status, after.results[-1].text) == (Status.OK, "2")
