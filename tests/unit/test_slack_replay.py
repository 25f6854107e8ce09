"""The HTTP-mode request check on its own, with a clock the test moves: replays inside the
window, expiry after it, and a full cache that refuses instead of forgetting."""

from __future__ import annotations

from slack_sdk.signature import SignatureVerifier

from bot.platforms.on_slack.replay import RequestCheck, Verdict

SECRET = "test-signing-secret"  # noqa: S105


def signed(body: bytes, stamp: int) -> dict[str, str]:
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=str(stamp), body=body)
    assert signature is not None
    return {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": signature}


def test_a_replay_inside_the_window_is_caught_and_forgotten_after_it() -> None:
    now = [1_800_000_000.0]
    check = RequestCheck(SECRET, clock=lambda: now[0])
    headers = signed(b"payload", int(now[0]))
    assert check.check(headers, b"payload") is Verdict.ACCEPT
    now[0] += 299
    assert check.check(headers, b"payload") is Verdict.REPLAY
    now[0] += 2  # too old now: refused as stale, not as a replay
    assert check.check(headers, b"payload") is Verdict.BAD
    assert check.check(signed(b"other", int(now[0])), b"other") is Verdict.ACCEPT


def test_a_failed_request_can_be_retried() -> None:
    check = RequestCheck(SECRET, clock=lambda: 1_800_000_000.0)
    headers = signed(b"payload", 1_800_000_000)
    assert check.check(headers, b"payload") is Verdict.ACCEPT
    check.forget(headers)
    assert check.check(headers, b"payload") is Verdict.ACCEPT


def test_a_full_cache_refuses_rather_than_forgets() -> None:
    now = [1_800_000_000.0]
    check = RequestCheck(SECRET, size=2, clock=lambda: now[0])
    first = signed(b"1", int(now[0]))
    assert check.check(first, b"1") is Verdict.ACCEPT
    assert check.check(signed(b"2", int(now[0])), b"2") is Verdict.ACCEPT
    assert check.check(signed(b"3", int(now[0])), b"3") is Verdict.FULL
    assert check.check(first, b"1") is Verdict.REPLAY
    now[0] += 301  # the first two expire, making room
    assert check.check(signed(b"3", int(now[0])), b"3") is Verdict.ACCEPT


def test_tampered_or_malformed_requests_are_bad() -> None:
    check = RequestCheck(SECRET, clock=lambda: 1_800_000_000.0)
    headers = signed(b"payload", 1_800_000_000)
    assert check.check(headers, b"payload!") is Verdict.BAD
    for signature in ("v0=00", "v0=é", ""):
        assert check.check({**headers, "X-Slack-Signature": signature}, b"payload") is Verdict.BAD
    assert check.check(headers, b"\xff\xfe not utf-8") is Verdict.BAD
    for stamp in ("", "x", "-1", "1e9", "١٨٠٠٠٠٠٠٠٠", "9" * 40):
        assert check.check({**headers, "X-Slack-Request-Timestamp": stamp}, b"payload") is (
            Verdict.BAD
        ), stamp
