"""The fleet's shared upkeep against a real database: duty leases spread over hosts and
move when a holder dies or stops, the census seats every live host per type, a NOTIFY
names its type and reaches the seats it rotates to, gated services do nothing without
their duty, and an idle host beats less often in a large fleet."""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import pytest

from supervisor.census import Census
from supervisor.claimer import Claimer
from supervisor.core.fleet import DUTIES, Wake, fleet
from supervisor.core.jobs import trigger_job
from supervisor.core.store import Store
from supervisor.duties import WAKE_FIRST, Duties
from supervisor.heartbeater import Heartbeater
from supervisor.planner import Planner
from supervisor.reaper import Reaper

from ..factory import age_lease, due_run, make_jobs_due, sql_rows, sql_value
from ..helpers import job as spec

TTL = 30.0
BEAT = 10.0


async def _worker(store: Store, wid: str, types: list[str]) -> None:
    await store.upsert_worker(wid, "h", 1, types, 4, "test", TTL)


async def _holders(store: Store) -> dict[str, str | None]:
    rows = await sql_rows(store, "SELECT name, holder FROM duties WHERE expires_at > now()")
    return {r["name"]: r["holder"] for r in rows}


async def test_duties_spread_over_hosts_one_per_beat_and_none_twice(store: Store) -> None:
    f = fleet(store)
    await f.add_duties(DUTIES)
    hosts = [f"w{i}" for i in range(len(DUTIES))]
    for h in hosts:
        await _worker(store, h, ["t"])
    beats = await asyncio.gather(*(f.beat(h, 0, TTL, [], BEAT, BEAT) for h in hosts))
    taken = [d for b in beats for d in b.duties]
    assert sorted(taken) == sorted(DUTIES), "every duty taken once, by beats at the same time"
    assert all(len(b.duties) == 1 for b in beats), "one duty per beat"
    # Renewing keeps them; nobody else can take a held duty.
    again = await f.beat("w0", 0, TTL, beats[0].duties, BEAT, BEAT)
    assert again.duties == beats[0].duties and again.free == 0
    await _worker(store, "late", ["t"])
    assert (await f.beat("late", 0, TTL, [], BEAT, BEAT)).duties == ()


async def test_a_dead_holders_duty_goes_to_a_host_without_duties_first(store: Store) -> None:
    f = fleet(store)
    await f.add_duties(DUTIES)
    for h in ("dead", "busy", "spare"):
        await _worker(store, h, ["t"])
    held = []
    while len(held) < len(DUTIES):  # "dead" takes every duty, one per beat
        held = list((await f.beat("dead", 0, TTL, held, BEAT, BEAT)).duties)
    assert (await f.beat("busy", 0, TTL, [], BEAT, BEAT)).duties == ()
    # The holder dies: its leases end on the database clock (aged, not slept through).
    await sql_value(store, "UPDATE duties SET expires_at = now() - interval '1 second'")
    busy = await f.beat("busy", 0, TTL, [], BEAT, BEAT)
    assert len(busy.duties) == 1
    # A host that holds one already waits one beat: the spare one, holding none, goes first.
    assert (await f.beat("busy", 0, TTL, busy.duties, BEAT, BEAT)).duties == busy.duties
    spare = await f.beat("spare", 0, TTL, [], BEAT, BEAT)
    assert len(spare.duties) == 1 and spare.duties != busy.duties
    # A beat by the dead holder cannot renew what it lost.
    zombie = await f.beat("dead", 0, TTL, held, BEAT, BEAT)
    assert not set(zombie.duties) & set(busy.duties + spare.duties)


async def test_a_clean_stop_frees_the_duties_at_once(store: Store) -> None:
    f = fleet(store)
    await f.add_duties(DUTIES)
    await _worker(store, "a", ["t"])
    held = (await f.beat("a", 0, TTL, [], BEAT, BEAT)).duties
    await store.stop_worker("a")
    assert held and not set(held) & set(await _holders(store))


async def test_the_census_seats_each_live_host_once_per_type(store: Store) -> None:
    f = fleet(store)
    for i in range(5):
        await _worker(store, f"w{i}", ["a", "b"] if i < 3 else ["b"])
    await _worker(store, "gone", ["a", "b"])
    await store.stop_worker("gone")
    assert await f.take_census() == 5
    assert await f.take_census() == 0, "an unchanged fleet writes nothing"
    seats = {}
    for i in range(5):
        seats[f"w{i}"] = (await f.beat(f"w{i}", 0, TTL, [], BEAT, BEAT)).seats
    assert (await f.beat("gone", 0, TTL, [], BEAT, BEAT)).seats == {}
    for type_, n in (("a", 3), ("b", 5)):
        mine = [s[type_] for s in seats.values() if type_ in s]
        assert sorted(seat for seat, _ in mine) == list(range(n))
        assert {size for _, size in mine} == {n}


async def test_a_census_loop_without_its_duty_reads_nothing(store: Store) -> None:
    await _worker(store, "w", ["a"])
    assert (await Census(store, gate=lambda: False).run_once()).changed == 0
    assert (await Census(store, gate=lambda: True).run_once()).changed == 1


async def test_a_manual_run_wakes_with_its_type_and_a_turn(store: Store, dsn: str) -> None:
    job = await store.insert_job(spec("j", "report.daily", cron="0 0 1 1 *"))
    got: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.add_listener("punchclock_wake", lambda *a: got.put_nowait(a[3]))
        await trigger_job(store, job.id, None, None)
        wake = Wake.parse(await asyncio.wait_for(got.get(), 10))
    finally:
        await conn.close()
    assert wake.type == "report.daily" and wake.turn is not None


def test_a_wake_reaches_the_few_seats_its_turn_names() -> None:
    size = 100
    hosts = []
    for seat in range(size):
        d = Duties(TTL)
        d.seats = {"t": (seat, size)}
        hosts.append(d)
    for turn in (0, 7, 99, 12345):
        woken = [d for d in hosts if d.wakes(Wake(turn, "t"), ["t"])]
        assert len(woken) == WAKE_FIRST
    counts: Counter[int] = Counter()
    for turn in range(size):
        for i, d in enumerate(hosts):
            counts[i] += d.wakes(Wake(turn, "t"), ["t"])
    assert set(counts.values()) == {WAKE_FIRST}, "every seat is first equally often"
    assert not hosts[0].wakes(Wake(0, "other"), ["t"]), "a type it does not offer"
    assert Duties(TTL).wakes(Wake(5, "t"), ["t"]), "not seated yet: always woken"
    assert hosts[50].wakes(Wake.parse(""), ["t"]), "an older sender's bare NOTIFY wakes all"


def test_polls_spread_so_the_fleet_polls_a_type_every_gap() -> None:
    d = Duties(TTL)
    assert d.poll_every(["t"], 5.0, 0.05) == 5.0
    d.seats = {"t": (3, 1000), "small": (0, 2)}
    assert d.poll_every(["t"], 5.0, 0.05) == 50.0
    assert d.poll_every(["t"], 0.05, 0.05) == 50.0
    assert d.poll_every(["t", "small"], 0.05, 0.05) == pytest.approx(0.1)
    assert not d.leads(["t"]) and d.leads(["small"]) and d.leads(["unseated"])


async def test_services_without_their_duty_touch_nothing(store: Store) -> None:
    await store.insert_job(spec("every-minute", "t"))
    await make_jobs_due(store)
    assert (await Planner(store, gate=lambda: False).run_once()).runs == 0
    assert (await Planner(store, gate=lambda: True).run_once()).runs > 0
    run_id = await due_run(store, "lost")
    await store.claim_runs(["echo"], 10, "w1", TTL)
    await age_lease(store, run_id, -1)
    assert (await Reaper(store, interval=1, gate=lambda: False).run_once()).reaped == 0
    assert (await Reaper(store, interval=1, gate=lambda: True).run_once()).reaped == 1


class _Idle:
    """A host running nothing (the heartbeater's view of the executor)."""

    def leases(self) -> list[tuple[int, int]]:
        return []

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        pass

    def in_flight(self) -> int:
        return 0


async def _seen(store: Store) -> object:
    return await sql_value(store, "SELECT last_seen_at FROM workers WHERE id = 'w'")


async def test_an_idle_host_in_a_big_fleet_beats_less_often(store: Store) -> None:
    await _worker(store, "w", ["t"])
    await fleet(store).add_duties(DUTIES)
    duties = Duties(3.0)
    hb = Heartbeater(store, owner="w", lease_ttl=3.0, holder=_Idle(), duties=duties)
    while duties.free or len(duties.held()) < len(DUTIES):  # alone: it takes every duty
        await hb.run_once()
    # The census seats it among 1,000 hosts offering "t": 50 s between idle beats.
    await sql_value(store, """UPDATE workers SET seats = '{"t": [0, 1000]}' WHERE id = 'w'""")
    await hb.run_once()
    assert hb.idle_every() == pytest.approx(50.0)
    seen = await _seen(store)
    await hb.run_once()
    assert await _seen(store) > seen, "a host holding duties beats every TTL/3"
    every = await sql_value(store, "SELECT beat_every FROM workers WHERE id = 'w'")
    assert every == pytest.approx(50.0), "each beat says how often it beats when idle"
    await sql_value(  # another host holds them all now
        store, "UPDATE duties SET holder = 'other', expires_at = now() + interval '1 minute'"
    )
    await hb.run_once()  # a beat that learns so
    assert duties.held() == []
    seen = await _seen(store)
    await hb.run_once()
    assert await _seen(store) == seen, "an idle host's next beat is not due yet"
    live = await sql_value(store, "SELECT worker_is_live(w) FROM workers w WHERE id = 'w'")
    await sql_value(store, "UPDATE workers SET last_seen_at = now() - interval '90 s'")
    late = await sql_value(store, "SELECT worker_is_live(w) FROM workers w WHERE id = 'w'")
    await sql_value(store, "UPDATE workers SET last_seen_at = now() - interval '101 s'")
    gone = await sql_value(store, "SELECT worker_is_live(w) FROM workers w WHERE id = 'w'")
    assert (live, late, gone) == (True, True, False), "live for two of its beats"


async def test_a_claimer_ignores_wakes_for_other_types_and_seats(store: Store) -> None:
    duties = Duties(TTL)
    duties.seats = {"t": (10, 100)}

    class Slots:
        free_slots = 4

    claimer = Claimer(
        store, owner="w", types=["t"], slots=Slots(), lease_ttl=TTL,  # type: ignore[arg-type]
        misfire_grace=60, poll_interval=5, duties=duties,
    )  # fmt: skip
    claimer.notified("3 other")
    claimer.notified("3 t")  # seats 3, 4, 5 are first
    assert claimer.ignored == 2 and not claimer._wake.is_set()
    claimer.notified("9 t")  # seats 9, 10, 11
    assert claimer._wake.is_set()
    claimer._wake.clear()
    claimer.notified(None)  # LISTEN (re)connected: always
    assert claimer._wake.is_set()


async def test_duties_taken_by_the_first_host_spread_once_the_fleet_is_there(
    store: Store,
) -> None:
    f = fleet(store)
    await f.add_duties(DUTIES)
    hosts = [f"w{i}" for i in range(len(DUTIES))]
    for h in hosts:
        await _worker(store, h, ["t"])
    first = Duties(TTL)
    while len(first.held()) < len(DUTIES):  # the first host up takes every duty
        first.beaten(await f.beat("w0", 0, TTL, first.held(), BEAT, BEAT), 0.0 + 1e9)
    assert first.surplus() == "", "alone as far as it knows: it keeps them"
    await f.take_census()
    others = {h: Duties(TTL) for h in hosts[1:]}
    for _ in range(len(DUTIES)):  # each round: every host beats once
        give = first.surplus()
        first.beaten(await f.beat("w0", 0, TTL, first.held(), BEAT, BEAT, give), 1e9)
        for h, d in others.items():
            d.beaten(await f.beat(h, 0, TTL, d.held(), BEAT, BEAT), 1e9)
    counts = Counter(len(d.held()) for d in [first, *others.values()])
    assert counts == {1: len(DUTIES)}, "one duty per host"
    assert sorted(await _holders(store)) == sorted(DUTIES)


def test_seated_hosts_poll_at_evenly_spread_phases() -> None:
    size = 50
    phases = []
    for seat in range(size):
        d = Duties(TTL)
        d.seats = {"t": (seat, size), "wide": (0, 500)}  # the least-offered type decides
        phases.append(d.phase(["t", "wide"]))
    assert phases == [seat / size for seat in range(size)]
    assert Duties(TTL).phase(["t"]) is None
    d = Duties(TTL)
    assert d.poll_every(["t"], 0.04, 0.04, unseated=5.0) == 5.0, "not seated yet: slow"
