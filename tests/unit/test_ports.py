"""Ports for the tests' listeners come from below the range of outgoing connections' local
ports, where no connection of another process can take one before its listener binds it,
and differ between processes that seeded `random` alike."""

from __future__ import annotations

import random
import socket

from bench.standins.ports import LOWEST, ephemeral_ports, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    low, high = ephemeral_ports()
    assert 1024 < low <= high
    for _ in range(20):
        port = free_port()
        assert LOWEST <= port < low
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_a_seeded_random_module_does_not_repeat_the_ports() -> None:
    random.seed(7)
    first = [free_port() for _ in range(5)]
    random.seed(7)
    assert [free_port() for _ in range(5)] != first


def test_a_port_in_use_is_not_given() -> None:
    taken = []
    try:
        for _ in range(50):
            listener = socket.socket()
            listener.bind(("127.0.0.1", free_port()))
            listener.listen()
            taken.append(listener)
        ports = {s.getsockname()[1] for s in taken}
        assert len(ports) == len(taken)
        assert free_port() not in ports
    finally:
        for listener in taken:
            listener.close()
