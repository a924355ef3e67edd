"""The keeper's coalescing window drops the messages of a child that registers and ends
inside it. What the keeper process knows after each window must be what it would know had
every message gone out: checked here by applying the bytes it receives with keeperd's own
parser, against a reference that applies every call's message."""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from typing import cast

import pytest

from supervisor.proc import keeper as keeper_module
from supervisor.proc.keeper import Keeper
from supervisor.proc.keeperd import Table, _apply


class _Proc:
    """What Keeper uses of its process: a pid and the write end of its stdin."""

    def __init__(self, write_fd: int) -> None:
        self.pid = os.getpid()
        self.stdin = os.fdopen(write_fd, "wb", buffering=0)


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Keeper, int]]:
    """A Keeper writing into a pipe the test reads, with a window that never times out."""
    monkeypatch.setattr(keeper_module, "_COALESCE_SECONDS", 3600.0)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    keeper = Keeper("test", cast("subprocess.Popen[bytes]", _Proc(write_fd)))
    yield keeper, read_fd
    os.close(read_fd)
    keeper._stdin.close()


def received(read_fd: int) -> list[bytes]:
    data = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except BlockingIOError:
            break
        data += chunk
    return [line for line in data.split(b"\n") if line]


def state(table: Table) -> dict[str, tuple[float, int, list[str]]]:
    return {k: (e.kill_by, e.pgid, e.cgroup) for k, e in table.items()}


async def test_a_child_that_ends_inside_the_window_costs_no_message(
    wire: tuple[Keeper, int],
) -> None:
    keeper, read_fd = wire
    keeper.announce_batch("feed", 10.0)  # written at once
    keeper.register(101, 10.0, "feed01")
    keeper.register(102, 10.0, "feed02")
    keeper.unregister(101, "feed01")
    keeper.withdraw("feed")
    await keeper.sync()
    assert received(read_fd) == [
        b"=feed* 10.000000",
        b"+102 10.000000 feed02",
        b"-0 feed*",
    ]


async def test_a_child_the_keeper_heard_of_is_always_forgotten_aloud(
    wire: tuple[Keeper, int],
) -> None:
    keeper, read_fd = wire
    keeper.register(101, 10.0, "a")
    await keeper.sync()  # its group went out
    keeper.register(101, 20.0, "a", moved=True)  # a renewal in the next window...
    keeper.unregister(101, "a")  # ...and its end: the keeper must drop what it knows
    keeper.announce("solo", 30.0)  # written at once, so its `-` must go out too
    keeper.register(102, 30.0, "solo")
    keeper.unregister(102, "solo")
    await keeper.sync()
    assert received(read_fd) == [
        b"+101 10.000000 a",
        b"+101 20.000000 a",
        b"-101 a",
        b"=solo 30.000000",  # an announcement writes the window before it, in order
        b"-102 solo",
    ]


@pytest.mark.parametrize("seed", range(20))
async def test_the_keeper_knows_after_each_window_what_every_message_would_tell(
    wire: tuple[Keeper, int], seed: int
) -> None:
    keeper, read_fd = wire
    rng = random.Random(seed)
    reference: Table = {}  # every call's message applied
    keeper_side: Table = {}  # what the keeper receives, applied by keeperd's parser
    live: dict[str, int] = {}  # child id -> pgid, registered and not yet ended
    counter = 0

    def tell(message: str) -> None:
        assert _apply(message.encode(), reference)

    for _ in range(300):
        action = rng.random()
        if action < 0.3:  # a new child, announced on its own (a cgroup) or by its batch
            counter += 1
            child_id, pgid = f"c{counter}", 1000 + counter
            if rng.random() < 0.2:
                keeper.announce(child_id, 5.0)
                tell(f"={child_id} 5.000000")
            keeper.register(pgid, 5.0, child_id)
            tell(f"+{pgid} 5.000000 {child_id}")
            live[child_id] = pgid
        elif action < 0.5 and live:  # a lease renewal moves a running child's deadline
            child_id = rng.choice(sorted(live))
            kill_by = rng.randint(6, 99)
            keeper.register(live[child_id], kill_by, child_id, moved=True)
            tell(f"+{live[child_id]} {kill_by:.6f} {child_id}")
        elif action < 0.8 and live:  # a child ends
            child_id = rng.choice(sorted(live))
            pgid = live.pop(child_id)
            keeper.unregister(pgid, child_id)
            tell(f"-{pgid} {child_id}")
        else:  # the window closes
            await keeper.sync()
            for line in received(read_fd):
                assert _apply(line, keeper_side)
            assert state(keeper_side) == state(reference)
    await keeper.sync()
    for line in received(read_fd):
        assert _apply(line, keeper_side)
    assert state(keeper_side) == state(reference)
    assert set(reference) == set(live)
    assert counter > 20  # the sequence started enough children to mean something
