"""The printed result: one table of cases, then the ratios, one per line (``ratio <name> = x``).

The ratio lines are the stable part of the output (``tests/bench/test_bench_smoke.py`` looks
for them); the table around them is for people.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.runtime_turns import TurnFigures
from bench.sqlite_steps import GrowthFigures, ResumeFigures, StepFigures

__all__ = ["RATIO_NAMES", "Report"]

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

_WIDTH = 58


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _x(value: float) -> str:
    return f"{value:,.2f}"


@dataclass(frozen=True, slots=True)
class Report:
    mode: str
    machine: str
    steps: StepFigures
    growth: GrowthFigures
    resume: ResumeFigures
    turns: dict[str, TurnFigures]
    elapsed_s: float

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
            f"{r.messages['long']:,} vs {r.messages['short']:,} messages: grows with what the "
            "model is sent",
        )
        out["tool_preread long/short session"] = (
            r.seconds["preread long"] / r.seconds["preread short"],
            f"{r.long_events:,} vs {r.short_events:,} events; the turn's tool tasks, read "
            "before each tool call; 1.0 = no growth",
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
                    f"history read, {events:,} events ({r.messages[name]:,} msgs)",
                    seconds,
                    seconds / raw_full,
                    "1 read",
                )
            )
        for name, events in (("short", r.short_events), ("long", r.long_events)):
            seconds = r.seconds[f"preread {name}"]
            rows.append(
                (
                    f"tool pre-read, {events:,} events ({r.tool_tasks[name]:,} turn tasks)",
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
            "raw SQLite commit measured in this run",
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
        width = max(len(name) for name in RATIO_NAMES)
        for name in RATIO_NAMES:
            value, note = ratios[name]
            lines.append(f"ratio {name:<{width}} = {value:8.2f}   ({note})")
        return "\n".join(lines)
