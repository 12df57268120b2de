"""The headline: issue 10's claims in one table, each a same-run ratio with its target.

``what | fxdurable | DBOS | LangGraph | ratio | target | met?``. The step rows compare
fxdurable's runtime step (a model response with one tool call, and that call's tool step) with
a DBOS step and a LangGraph superstep in the same mode, and the tool-step rows its tool step
alone (N calls of one response, run one after another) with the same peer figures; their
ratio is the cheaper peer's cost ÷ fxdurable's, repetition by repetition (the repetitions
interleave the systems, so a slow patch of the machine lands on all of them). The batch row
(issue 23) does the same per call of a parallel batch of safe no-op calls on WAL+FULL
(bench/peers.py's ``BATCH`` workload); its raw figures, every repetition, are printed below
the table. Below them: growth with session length, RSS over a long session, and the rows
other sections provide (Redis round trips, RQ) when they were measured. Every figure is the
median of the repetitions with its range (min–max).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.dynamodb_steps import DynamoStepFigures
from bench.peer_fxdurable import ONE_RESPONSE
from bench.peers import POSTGRES, PeerRun
from bench.pg_workers import TARGET_STEPS_S, PgWorkerFigures
from bench.report import RedisSection
from bench.rss_turns import RssFigures
from bench.runtime_growth import GrowthRuns
from bench.startup import TARGETS_S, StartupFigures

__all__ = [
    "Figure",
    "Headline",
    "Row",
    "peer_mode",
    "pg_worker_rows",
    "redis_rows",
    "startup_rows",
]

# The peer mode compared at each SQLite setting: DBOS on WAL, LangGraph with durability "sync"
# (a superstep's checkpoint written before the next starts), like fxdurable's journal.
# On PostgreSQL (issue 27): fxdurable's Postgres store against DBOS with its system database on
# the same server; no LangGraph Postgres checkpointer is installed, so its cell is empty.
_COMPARED = {
    "FULL": {"fxdurable": "WAL+FULL", "DBOS": "WAL+FULL", "LangGraph": "WAL+FULL sync"},
    "NORMAL": {"fxdurable": "WAL+NORMAL", "DBOS": "WAL+NORMAL", "LangGraph": "WAL+NORMAL sync"},
    "Postgres": {"fxdurable": POSTGRES, "DBOS": POSTGRES, "LangGraph": POSTGRES},
}
_WHERE = {"FULL": "WAL+FULL", "NORMAL": "WAL+NORMAL", "Postgres": "PostgreSQL"}
SYSTEMS = ("fxdurable", "DBOS", "LangGraph")


def peer_mode(system: str, sync: str) -> str:
    return _COMPARED[sync][system]


@dataclass(frozen=True, slots=True)
class Figure:
    """Repeated measurements of one quantity: their median and range."""

    samples: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        return cls(tuple(values))

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def show(self, scale: float = 1.0, digits: int = 2) -> str:
        lo, hi = min(self.samples) * scale, max(self.samples) * scale
        mid = self.median * scale
        if len(self.samples) == 1 or lo == hi:
            return f"{mid:.{digits}f}"
        return f"{mid:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"

    def to_json(self) -> dict[str, object]:
        return {
            "median": self.median,
            "min": min(self.samples),
            "max": max(self.samples),
            "samples": list(self.samples),
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table. ``cells`` holds what each system shows (a figure, or a note
        such as "not installed"); ``ratio`` (or, where there is no reference, the figure itself) is
    checked against ``target`` (``"≥ 2"``, ``"≤ 1.2"``, ``"≤ 0.15 s"``)."""

    what: str
    cells: dict[str, str]
    ratio: Figure | None
    target: str
    note: str = ""
    is_ratio: bool = True  # False: ``ratio`` holds the figure itself (seconds, a count)

    @property
    def met(self) -> str:
        if self.ratio is None:
            return "—"
        op, bound = self.target.split()[:2]  # "≥ 2", "≤ 1.2", "≤ 0.15 s"
        value = self.ratio.median
        ok = value >= float(bound) if op == "≥" else value <= float(bound)
        return "yes" if ok else "no"

    def to_json(self) -> dict[str, object]:
        return {
            "what": self.what,
            "cells": self.cells,
            "ratio": None if self.ratio is None else self.ratio.to_json(),
            "target": self.target,
            "met": self.met,
            "note": self.note,
            "is_ratio": self.is_ratio,
        }


def _ms(run: PeerRun, mode: str, n: int) -> Figure | None:
    values = run.samples.get(mode, {}).get(str(n))
    return Figure.of(values) if values else None


def _cell(run: PeerRun, mode: str, n: int) -> str:
    figure = _ms(run, mode, n)
    if figure is not None:
        return figure.show(scale=1e3)
    return (run.note or "not measured").split(" (", 1)[0]  # the reason is in the mode table


@dataclass(slots=True)
class Headline:
    """What the headline section measured; ``rows()`` builds the table."""

    mode: str  # "default" or "quick"
    ns: tuple[int, ...]
    peers: dict[str, PeerRun]
    growth: list[GrowthRuns] = field(default_factory=list)
    growth_note: str | None = None  # why a store's growth row is missing
    rss: list[RssFigures] = field(default_factory=list)
    extra: list[Row] = field(default_factory=list)  # rows other sections provide
    # the parallel batch (issue 23): seconds per call of a batch of ``batch_width`` calls
    batch: dict[str, PeerRun] = field(default_factory=dict)
    batch_width: int = 8

    def step_rows(self) -> list[Row]:
        rows = []
        fxd = self.peers["fxdurable"]
        for sync in _COMPARED:
            for n in self.ns:
                cells = {s: _cell(self.peers[s], peer_mode(s, sync), n) for s in SYSTEMS}
                ratio = _cheaper_peer_ratio(self.peers, sync, n)
                rows.append(
                    Row(
                        f"ms per step, {n} steps per unit, {_WHERE[sync]}",
                        cells,
                        ratio,
                        "≥ 2",
                        "cheaper peer ÷ fxdurable",
                    )
                )
            rows += self._one_response_rows(sync)
            first, last = self.ns[0], self.ns[-1]
            a = _ms(fxd, peer_mode("fxdurable", sync), first)
            b = _ms(fxd, peer_mode("fxdurable", sync), last)
            if a is not None and b is not None and first != last:
                flat = Figure.of([y / x for x, y in zip(a.samples, b.samples, strict=True)])
                rows.append(
                    Row(
                        f"fxdurable ms per step at {last} ÷ at {first} steps, {_WHERE[sync]}",
                        {"fxdurable": flat.show()},
                        flat,
                        "≤ 1.2",
                        "flat in the number of calls per turn",
                    )
                )
        return rows

    def _one_response_rows(self, sync: str) -> list[Row]:
        """Issue 23's and 27's sequential tool step: fxdurable's N calls of one response (a
        tool step each) against the peers' N steps, where that mode was measured."""
        mode = peer_mode("fxdurable", sync) + ONE_RESPONSE
        if mode not in self.peers["fxdurable"].samples:
            return []
        rows = []
        for n in self.ns:
            cells = {s: _cell(self.peers[s], peer_mode(s, sync), n) for s in SYSTEMS}
            cells["fxdurable"] = _cell(self.peers["fxdurable"], mode, n)
            rows.append(
                Row(
                    f"ms per tool step, {n} calls of one response, {_WHERE[sync]}",
                    cells,
                    _cheaper_peer_ratio(self.peers, sync, n, fxd_mode=mode),
                    "≥ 2",
                    "cheaper peer's step ÷ fxdurable's; its turn's 2 model steps spread over N",
                )
            )
        return rows

    def batch_rows(self) -> list[Row]:
        """Issue 23's parallel row: ms per call of one batch, cheaper peer ÷ fxdurable."""
        if not self.batch:
            return []
        n = self.batch_width
        cells = {s: _cell(self.batch[s], peer_mode(s, "FULL"), n) for s in SYSTEMS}
        return [
            Row(
                f"ms per call, parallel batch of {n} safe calls, WAL+FULL",
                cells,
                _cheaper_peer_ratio(self.batch, "FULL", n),
                "≥ 4",
                f"cheaper peer ÷ fxdurable; fxdurable's turn ÷ {n} includes its 2 model steps",
            )
        ]

    def batch_figures(self) -> list[str]:
        """The batch row's raw figures: each system's ms per call in every repetition."""
        if not self.batch:
            return []
        lines = [f"Parallel batch of {self.batch_width} safe no-op calls, WAL+FULL (ms per call):"]
        for system in SYSTEMS:
            run, mode = self.batch[system], peer_mode(system, "FULL")
            values = run.samples.get(mode, {}).get(str(self.batch_width))
            shown = ", ".join(f"{v * 1e3:.3f}" for v in values) if values else run.note
            lines.append(f"- {system} ({mode}): {shown or 'not measured'}")
        return lines

    def render_batch(self) -> str:
        """The batch row alone (``python -m bench --only batch``) and its raw figures."""
        return "\n".join([*_markdown(self._table(self.batch_rows())), "", *self.batch_figures()])

    def _table(self, rows: Sequence[Row]) -> list[Sequence[str]]:
        header = ("what", *SYSTEMS, "ratio", "target", "met?")
        return [header] + [
            (
                row.what,
                *(row.cells.get(s, "") for s in SYSTEMS),
                "" if row.ratio is None or not row.is_ratio else row.ratio.show(),
                row.target,
                row.met,
            )
            for row in rows
        ]

    def other_rows(self) -> list[Row]:
        rows = []
        for g in self.growth:
            ratio = Figure.of(g.ratios)
            short, long = Figure.of(g.short_s), Figure.of(g.long_s)
            rows.append(
                Row(
                    f"runtime round, ~{g.long_events:,}-event ÷ ~{g.short_events}-event "
                    f"session, {g.store}",
                    {"fxdurable": f"{long.show(1e3)} ÷ {short.show(1e3)} ms"},
                    ratio,
                    "≤ 1.1",  # issue 23 (issue 10 asked ≤ 1.2)
                    "model step + tool step, through the Runtime",
                )
            )
        if self.rss:
            ratio = Figure.of([r.ratio for r in self.rss])
            r = self.rss[0]
            mib = Figure.of([x.rss_late / 2**20 for x in self.rss])
            rows.append(
                Row(
                    f"RSS after {r.turns_late:,} ÷ after {r.turns_early:,} turns of one session",
                    {"fxdurable": f"{mib.show(digits=1)} MiB at {r.turns_late:,}"},
                    ratio,
                    "≤ 1.1",
                )
            )
        return rows + self.extra

    def rows(self) -> list[Row]:
        return self.step_rows() + self.batch_rows() + self.other_rows()

    def mode_rows(self) -> list[tuple[str, str, dict[int, str]]]:
        """Every measured mode of every system: (system, mode, {n: ms per step})."""
        out = []
        for system in SYSTEMS:
            run = self.peers[system]
            if not run.samples:
                out.append((system, run.note or "not measured", {}))
            for mode in run.samples:
                out.append((system, mode, {n: _cell(run, mode, n) for n in self.ns}))
        return out

    def render(self) -> str:
        table = self._table(self.rows())
        lines = [
            "Headline (issues 10 and 23): same-run ratios; each figure the median of the "
            "repetitions (min–max); ms per step for the step rows",
            "",
            *_markdown(table),
            "",
            "Every mode measured (ms per step):",
            "",
            *_markdown(
                [("system", "mode", *(f"N={n}" for n in self.ns))]
                + [(s, m, *(cells.get(n, "") for n in self.ns)) for s, m, cells in self.mode_rows()]
            ),
        ]
        if self.batch:
            lines += ["", *self.batch_figures()]
        if self.growth_note:
            lines.append(f"\nRedis runtime growth {self.growth_note}")
        return "\n".join(lines)


def _cheaper_peer_ratio(
    peers: dict[str, PeerRun], sync: str, n: int, *, fxd_mode: str | None = None
) -> Figure | None:
    """The cheaper peer's figure ÷ fxdurable's (in ``fxd_mode``, by default the one compared
    at ``sync``), repetition by repetition."""
    fxd = _ms(peers["fxdurable"], fxd_mode or peer_mode("fxdurable", sync), n)
    others = [_ms(peers[s], peer_mode(s, sync), n) for s in SYSTEMS[1:]]
    present = [p for p in others if p is not None]
    if fxd is None or not present:
        return None
    reps = min(len(fxd.samples), *(len(p.samples) for p in present))
    return Figure.of([min(p.samples[i] for p in present) / fxd.samples[i] for i in range(reps)])


def _markdown(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(rows[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [
        line(r) for r in rows[1:]
    ]


def redis_rows(section: RedisSection | None, note: str | None) -> list[Row]:
    """Issue 10's Redis and RQ rows from the Redis section: store round trips for one tool
    step plus its model call through the Runtime (reads included), and RQ turns/s ÷
    RQ's own no-op jobs/s (one figure, the median of the section's repetitions)."""
    if section is None:
        return [Row("Redis round trips; RQ turns/s ÷ no-op jobs/s", {}, None, "—", note or "")]
    s = section.steps
    journal = f"journal calls alone: {s.trips_per_model_step:g} + {s.trips_per_tool_step:g}"
    rows = [
        Row(
            "Redis round trips, one tool step + its model call (through the Runtime)",
            {"fxdurable": f"{s.trips_per_runtime_step:g}"},
            Figure.of([s.trips_per_runtime_step]),
            "≤ 2",  # issue 23 (issue 10 asked ≤ 6)
            journal,
            is_ratio=False,
        )
    ]
    for name, (value, detail) in section.ratios().items():
        if name.startswith("rq turns/noop_jobs"):
            what = "RQ turns/s ÷ no-op jobs/s, " + name.removeprefix("rq turns/noop_jobs ")
            rows.append(
                Row(what, {"fxdurable": f"{value:.2f}"}, Figure.of([value]), "≥ 0.5", detail)
            )
    return rows


def dynamodb_rows(figures: DynamoStepFigures | None) -> list[Row]:
    """Issue 23's DynamoDB row: requests for one tool step plus its model call through the
    Runtime (reads included), in a session of 10 and of 200 earlier messages (counted)."""
    if figures is None:
        return []
    return [
        Row(
            f"DynamoDB requests, one tool step + its model call, {n} earlier messages",
            {"fxdurable": f"{requests:g}"},
            Figure.of([requests]),
            "≤ 2",
            "counted on moto",
            is_ratio=False,
        )
        for n, requests in sorted(figures.runtime_tool_step.items())
    ]


def pg_worker_rows(figures: PgWorkerFigures | None) -> list[Row]:
    """Issue 27's throughput row: tool steps per second, aggregate, on the most worker
    processes measured (4) sharing one Postgres database with no-op tools; its cell also
    says the turns per second and the scaling over 1 worker."""
    if figures is None:
        return []
    many = max(figures.runs, default=4)
    what = f"tool steps/s, {many} Postgres queue workers on one database, no-op tools"
    target = f"≥ {TARGET_STEPS_S:g}"
    if figures.note:
        return [Row(what, {}, None, target, figures.note, is_ratio=False)]
    steps = Figure.of(figures.steps_per_s(many))
    turns = Figure.of(figures.turns_per_s(many))
    scaling = Figure.of(figures.scaling())
    # The table shows no note: where the workers and the server outnumber the cores, say so
    # in the row itself, since that bounds the figure.
    cores = f"{figures.cpus} cores" + (": CPU-bound" if figures.cpus <= many else "")
    return [
        Row(
            f"{what} ({cores})",
            {"fxdurable": f"{steps.show(digits=0)}; {turns.show(digits=1)} turns/s"},
            steps,
            target,
            f"aggregate, {figures.calls} calls a turn; {many} ÷ 1 worker: {scaling.show()}; "
            f"{many} worker processes and the server on {figures.cpus} cores: CPU-bound",
            is_ratio=False,
        )
    ]


# The startup cases issue 10 sets a target for (bench.startup.TARGETS_S), with their labels.
_STARTUP = {
    "import": "import fxdurable (fresh process)",
    "worker": "worker ready (spawn → registered with Redis)",
    "first_step": "fxdurable demo: first model step",
    "recovery": "fxdurable demo: recovery after a crash (wall)",
}


def startup_rows(figures: StartupFigures) -> list[Row]:
    """The startup section's cases with a target: wall seconds of a fresh process (median and
    range of its repetitions), checked against the target directly."""
    rows = []
    for case, what in _STARTUP.items():
        values = figures.samples.get(case)
        if not values:
            continue
        figure = Figure.of(values)
        rows.append(
            Row(
                what,
                {"fxdurable": figure.show(digits=3) + " s"},
                figure,
                f"≤ {TARGETS_S[case]:.2f} s",
                "wall s of a fresh process, checked directly",
                is_ratio=False,
            )
        )
    return rows
