"""The printed result: one table of cases, then the ratios, one per line (``ratio <name> = x``).

The ratio lines are the stable part of the output (``tests/bench/test_bench_smoke.py`` looks
for them); the table around them is for people.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.redis_steps import RedisStepFigures
from bench.rq_throughput import WORKER_COUNTS, RqFigures
from bench.runtime_turns import TurnFigures
from bench.sqlite_steps import GrowthFigures, ResumeFigures, StepFigures

__all__ = ["RATIO_NAMES", "REDIS_RATIO_NAMES", "RedisSection", "Report"]

RATIO_NAMES = (
    "model_step/raw_commit FULL",
    "tool_step/raw_commit FULL",
    "model_step/raw_commit NORMAL",
    "tool_step/raw_commit NORMAL",
    "tool_step long/short session",
    "model_step long/short session",
    "resume_read long/short session",
    "history_read long/short session",
    "tool_preread long/short session",
    "e2e_turn/raw_commit FULL",
    "e2e_turn/raw_commit NORMAL",
)

# Printed when redis-server (and the redis extra) are there; otherwise a "skipped" line says why.
REDIS_RATIO_NAMES = (
    "redis model_step/round_trip",
    "redis tool_step/round_trip",
    "redis model_step/round_trip AOF",
    "redis tool_step/round_trip AOF",
    "redis tool_step long/short session",
    "redis model_step long/short session",
    "rq turns/noop_jobs SQLite FULL 1 worker",
    "rq turns/noop_jobs SQLite FULL 2 workers",
    "rq turns/noop_jobs Redis 1 worker",
    "rq turns/noop_jobs Redis 2 workers",
)

_WIDTH = 58
_RQ_STORES = (("sqlite", "SQLite FULL"), ("redis", "Redis"))
_AOF = "AOF everysec"


def _workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _x(value: float) -> str:
    return f"{value:,.2f}"


@dataclass(frozen=True, slots=True)
class RedisSection:
    """The Redis store's steps (on a server without and with AOF), its growth with session
    length, and the RQ throughput: all on redis-servers the bench started."""

    version: str
    steps: RedisStepFigures
    growth: GrowthFigures
    rq: RqFigures

    def _raw(self, persistence: str) -> float:
        return self.steps.seconds[f"set {persistence}"]

    def ratios(self) -> dict[str, tuple[float, str]]:
        s, g, rq = self.steps, self.growth, self.rq
        out: dict[str, tuple[float, str]] = {}
        for persistence in s.persistences:
            raw = self._raw(persistence)
            suffix = " AOF" if persistence == _AOF else ""
            for kind, trips, tx in (
                ("model", s.trips_per_model_step, s.tx_per_model_step),
                ("tool", s.trips_per_tool_step, s.tx_per_tool_step),
            ):
                ratio = s.seconds[f"{kind} {persistence}"] / raw
                out[f"redis {kind}_step/round_trip{suffix}"] = (
                    ratio,
                    f"{persistence}; {trips:g} round trips, {tx:g} transaction(s) per step; "
                    f"{ratio / trips:.2f} raw SETs each",
                )
        lengths = f"~{g.long_events:,.0f} vs ~{g.short_events:,.0f} events"
        for kind in ("tool", "model"):
            out[f"redis {kind}_step long/short session"] = (
                g.seconds[f"{kind} long"] / g.seconds[f"{kind} short"],
                f"no AOF, {lengths}; 1.0 = no growth",
            )
        for workers in WORKER_COUNTS:
            noop = rq.rate("noop", workers)
            for kind, label in _RQ_STORES:
                turns = rq.rate(kind, workers)
                ratios = rq.ratios(kind, workers)
                out[f"rq turns/noop_jobs {label} {_workers(workers)}"] = (
                    rq.ratio(kind, workers),
                    f"median of {len(ratios)} reps, range {min(ratios):.2f}–{max(ratios):.2f}; "
                    f"{turns:,.1f} turns/s beside {noop:,.1f} no-op jobs/s; "
                    f"{rq.jobs_per_item(kind, workers):.2f} RQ jobs and "
                    f"{rq.attempts_per_item(kind, workers):.2f} attempts per turn",
                )
        return out

    def render(self) -> list[str]:
        s, g, rq = self.steps, self.growth, self.rq
        lines = [
            f"Redis store (redis-server {self.version}, the bench's own on 127.0.0.1): "
            "× SET = cost / one raw SET round trip on the same server",
            "",
            f"{'case':<{_WIDTH}} {'µs/op':>10} {'× SET':>8}  {'store':<7}",
        ]

        def row(case: str, seconds: float, ratio: float, trips: str) -> None:
            lines.append(f"{case:<{_WIDTH}} {_us(seconds):>10} {_x(ratio):>8}  {trips}".rstrip())

        model_step = (s.trips_per_model_step, s.tx_per_model_step)
        tool_step = (s.trips_per_tool_step, s.tx_per_tool_step)
        for persistence in s.persistences:
            raw = self._raw(persistence)
            ping = s.seconds[f"ping {persistence}"]
            row(f"raw round trip: PING, {persistence}", ping, ping / raw, "1 rt")
            row(f"raw round trip: SET (64 B), {persistence}", raw, 1.0, "1 rt")
            for kind, label, trips, tx in (
                ("model", "model step: record_model_call", *model_step),
                ("tool", "tool step: start_tool + finish_tool", *tool_step),
            ):
                seconds = s.seconds[f"{kind} {persistence}"]
                row(f"{label}, {persistence}", seconds, seconds / raw, f"{trips:g} rt, {tx:g} tx")
        raw = self._raw(s.persistences[0])
        for kind in ("tool", "model"):
            for name, events in (("short", g.short_events), ("long", g.long_events)):
                seconds = g.seconds[f"{kind} {name}"]
                case = f"{kind} step, session of ~{events:,.0f} events, no AOF"
                row(case, seconds, seconds / raw, "")
        lines += [
            "",
            f"RQ workers ({rq.items('noop', 1):,} jobs or one-turn sessions per run, median of "
            f"{rq.reps()} run(s); queue and Redis store on the no-AOF server): "
            "× no-op = time per turn / time per RQ no-op job on as many workers",
            "",
            f"{'case':<{_WIDTH}} {'µs/op':>10} {'× no-op':>8}  {'jobs':<7}",
        ]
        rates = []
        for workers in WORKER_COUNTS:
            noop = rq.rate("noop", workers)
            cases = [("noop", f"no-op job (rq worker, rq.Worker), {_workers(workers)}")]
            cases += [
                (kind, f"turn, {label} store (fxdurable worker), {_workers(workers)}")
                for kind, label in _RQ_STORES
            ]
            for kind, case in cases:
                rate = rq.rate(kind, workers)
                row(case, 1 / rate, noop / rate, f"{rq.jobs_per_item(kind, workers):.2f}/item")
            rates.append(
                f"{_workers(workers)}: {noop:,.1f} no-op jobs/s, "
                + ", ".join(
                    f"{label} {rq.rate(k, workers):,.1f} turns/s" for k, label in _RQ_STORES
                )
            )
        submit = max(
            rq.submit_share(k, w) for k in ("noop", "sqlite", "redis") for w in WORKER_COUNTS
        )
        lines += [
            "RQ: " + "; ".join(rates),
            f"(enqueueing or submitting, one at a time from the bench process, took at most "
            f"{submit:.0%} of a timed run)",
        ]
        return lines


@dataclass(frozen=True, slots=True)
class Report:
    mode: str
    machine: str
    steps: StepFigures
    growth: GrowthFigures
    resume: ResumeFigures
    turns: dict[str, TurnFigures]
    elapsed_s: float
    redis: RedisSection | None = None
    redis_note: str | None = None  # why there is no Redis section (skipped or failed)

    def _raw(self, sync: str) -> float:
        return self.steps.seconds[f"raw {sync}"]

    def ratios(self) -> dict[str, tuple[float, str]]:
        """Each ratio with a note saying what it compares."""
        s, g, r = self.steps, self.growth, self.resume
        tx_m, tx_t = s.tx_per_model_step, s.tx_per_tool_step
        out: dict[str, tuple[float, str]] = {}
        for sync in ("FULL", "NORMAL"):
            raw = self._raw(sync)
            model = s.seconds[f"model {sync}"] / raw
            tool = s.seconds[f"tool {sync}"] / raw
            out[f"model_step/raw_commit {sync}"] = (
                model,
                f"{tx_m:g} transaction(s) per step; {model / tx_m:.2f} raw commits each",
            )
            out[f"tool_step/raw_commit {sync}"] = (
                tool,
                f"{tx_t:g} transaction(s) per step; {tool / tx_t:.2f} raw commits each",
            )
        lengths = f"~{g.long_events:,.0f} vs ~{g.short_events:,.0f} events"
        for kind in ("tool", "model"):
            out[f"{kind}_step long/short session"] = (
                g.seconds[f"{kind} long"] / g.seconds[f"{kind} short"],
                f"FULL, {lengths}; 1.0 = no growth",
            )
        resume_lengths = f"{r.long_events:,} vs {r.short_events:,} events"
        out["resume_read long/short session"] = (
            r.seconds["resume long"] / r.seconds["resume short"],
            f"{resume_lengths}; 1.0 = no growth",
        )
        out["history_read long/short session"] = (
            r.seconds["history long"] / r.seconds["history short"],
            f"{r.messages['long']:,} vs {r.messages['short']:,} messages; a cold load, once per "
            "worker and session: grows with what the model is sent",
        )
        out["tool_preread long/short session"] = (
            r.seconds["preread long"] / r.seconds["preread short"],
            f"{r.long_events:,} vs {r.short_events:,} events; the turn's tool tasks, read "
            "once per attempt; 1.0 = no growth",
        )
        for sync, t in self.turns.items():
            raw = self._raw(sync)
            out[f"e2e_turn/raw_commit {sync}"] = (
                (1 / t.turns_per_s) / raw,
                f"{t.turns_per_s:,.0f} turns/s beside {1 / raw:,.0f} raw commits/s; "
                f"{t.transactions_per_turn:.1f} transactions per turn",
            )
        return out

    def _rows(self) -> list[tuple[str, float, float | None, str]]:
        """(case, seconds per op, ratio to the raw commit of its mode, store round trips)."""
        s, g, r = self.steps, self.growth, self.resume
        raw_full = self._raw("FULL")
        rows: list[tuple[str, float, float | None, str]] = []
        for sync in ("FULL", "NORMAL"):
            rows.append((f"raw commit (WAL, 1 INSERT), {sync}", self._raw(sync), 1.0, "1 tx"))
        for sync in ("FULL", "NORMAL"):
            raw = self._raw(sync)
            for kind, label, tx in (
                ("model", "model step: record_model_call", s.tx_per_model_step),
                ("tool", "tool step: start_tool + finish_tool", s.tx_per_tool_step),
            ):
                seconds = s.seconds[f"{kind} {sync}"]
                rows.append((f"{label}, {sync}", seconds, seconds / raw, f"{tx:g} tx"))
        for kind in ("tool", "model"):
            for name, events in (("short", g.short_events), ("long", g.long_events)):
                seconds = g.seconds[f"{kind} {name}"]
                rows.append(
                    (
                        f"{kind} step, session of ~{events:,.0f} events, FULL",
                        seconds,
                        seconds / raw_full,
                        "",
                    )
                )
        for name, events in (("short", r.short_events), ("long", r.long_events)):
            seconds = r.seconds[f"resume {name}"]
            rows.append(
                (f"resume read, {events:,}-event session", seconds, seconds / raw_full, "1 read")
            )
        for name, events in (("short", r.short_events), ("long", r.long_events)):
            seconds = r.seconds[f"history {name}"]
            rows.append(
                (
                    f"cold history load, {events:,} events ({r.messages[name]:,} msgs)",
                    seconds,
                    seconds / raw_full,
                    "1 read",
                )
            )
        for name, events in (("short", r.short_events), ("long", r.long_events)):
            seconds = r.seconds[f"preread {name}"]
            rows.append(
                (
                    f"attempt's task read, {events:,} events ({r.tool_tasks[name]:,} turn tasks)",
                    seconds,
                    seconds / raw_full,
                    "1 read",
                )
            )
        for sync, t in self.turns.items():
            seconds = 1 / t.turns_per_s
            rows.append(
                (
                    f"e2e turn (3 model + 2 tool steps), {sync}",
                    seconds,
                    seconds / self._raw(sync),
                    f"{t.transactions_per_turn:.1f} tx",
                )
            )
        return rows

    def render(self) -> str:
        lines = [
            f"fxdurable bench ({self.mode} run, {self.elapsed_s:.1f} s): every figure beside a "
            "baseline measured in this run (a raw SQLite commit; further down, a raw Redis "
            "round trip and an RQ no-op job)",
            self.machine,
            "",
            f"{'case':<{_WIDTH}} {'µs/op':>10} {'× raw':>8}  {'store':<7}",
        ]
        for case, seconds, ratio, trips in self._rows():
            shown = "" if ratio is None else _x(ratio)
            lines.append(f"{case:<{_WIDTH}} {_us(seconds):>10} {shown:>8}  {trips:<7}".rstrip())
        turns = ", ".join(f"{sync} {t.turns_per_s:,.0f} turns/s" for sync, t in self.turns.items())
        some = next(iter(self.turns.values()))
        lines += [
            f"end-to-end: {turns} ({some.turns} one-turn sessions, {some.concurrency} workers, "
            f"ScriptedModel); raw FULL {1 / self._raw('FULL'):,.0f} commits/s, "
            f"NORMAL {1 / self._raw('NORMAL'):,.0f} commits/s",
            "",
            "ratios (same run; × raw = cost / raw commit of the same synchronous mode):",
        ]
        ratios = self.ratios()
        width = max(len(name) for name in (*RATIO_NAMES, *REDIS_RATIO_NAMES))
        for name in RATIO_NAMES:
            value, note = ratios[name]
            lines.append(f"ratio {name:<{width}} = {value:8.2f}   ({note})")
        lines.append("")
        if self.redis is None:
            lines.append(f"Redis/RQ rows {self.redis_note}")
            return "\n".join(lines)
        lines += self.redis.render()
        lines += [
            "",
            "ratios, Redis and RQ (same run; round_trip = a raw SET on the same server; "
            "rq = turns/s ÷ RQ no-op jobs/s on as many worker processes):",
        ]
        redis_ratios = self.redis.ratios()
        for name in REDIS_RATIO_NAMES:
            value, note = redis_ratios[name]
            lines.append(f"ratio {name:<{width}} = {value:8.2f}   ({note})")
        return "\n".join(lines)
