"""Write a run's results: ``bench/results/latest.json`` (every figure, with its repetitions)
and ``docs/benchmarks.md`` (the headline table, abort and steer latency, the machine,
versions, modes, and how to reproduce it). ``python -m bench --write`` (what ``make bench``
runs) calls :func:`write_results`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench.abort_latency import WORKLOAD as INTERRUPTS_WORKLOAD
from bench.abort_latency import InterruptLatency, render_interrupts
from bench.abort_latency import to_json as interrupts_json
from bench.headline import SYSTEMS, Figure, Headline
from bench.peer_dbos import MODES as DBOS_MODES
from bench.peer_fxdurable import MODES as FXD_MODES
from bench.peer_langgraph import MODES as LANGGRAPH_MODES
from bench.peers import package_version

__all__ = ["MODE_NOTES", "results", "write_results"]

REPO = Path(__file__).resolve().parents[1]
MODE_NOTES = {
    "fxdurable": "embedded Runtime, SQLite store (WAL) or its PostgreSQL store; a step is a "
    "ScriptedModel response with one call of a no-op tool, then that call's tool step "
    "(intent, run, result); in the 'one response' modes a step is one tool step, N calls "
    "of one response run one after another",
    "DBOS": "a workflow of N @DBOS.step no-op steps; SQLite system database in DBOS's "
    "default (rollback journal) and on WAL through a system_database_engine",
    "LangGraph": "a StateGraph looping one no-op node N supersteps, SqliteSaver "
    "(WAL); durability 'sync' (compared) and 'async' (its default)",
}
_MODES = {"fxdurable": FXD_MODES, "DBOS": DBOS_MODES, "LangGraph": LANGGRAPH_MODES}


def _versions(headline: Headline) -> dict[str, str | None]:
    versions = {run.system: run.version for run in headline.peers.values()}
    versions["fxdurable"] = versions["fxdurable"] or package_version("fxdurable")
    versions["langgraph-checkpoint-sqlite"] = package_version("langgraph-checkpoint-sqlite")
    return versions


Machine = dict[str, str | int]


def results(
    headline: Headline,
    *,
    machine: Machine,
    elapsed_s: float,
    ratios: dict[str, object],
    interrupts: InterruptLatency | None = None,
) -> dict[str, object]:
    """Everything the run measured, as JSON-ready data (``interrupts``: None when the run
    did not measure them)."""
    steps = {
        system: {
            mode: {n: Figure.of(v).to_json() for n, v in by_n.items()}
            for mode, by_n in headline.peers[system].samples.items()
        }
        for system in SYSTEMS
    }
    return {
        "mode": headline.mode,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": round(elapsed_s, 1),
        "reproduce": "make bench",
        "machine": machine,
        "versions": _versions(headline),
        "modes": {s: {"measured": list(_MODES[s]), "what": MODE_NOTES[s]} for s in SYSTEMS},
        "not_measured": {r.system: r.note for r in headline.peers.values() if r.note},
        "headline": [row.to_json() for row in headline.rows()],
        "seconds_per_step": steps,
        # issue 23's parallel row: seconds per call of one batch, {system: {mode: {width: ...}}}
        "batch_seconds_per_call": {
            system: {
                mode: {n: Figure.of(v).to_json() for n, v in by_n.items()}
                for mode, by_n in run.samples.items()
            }
            for system, run in headline.batch.items()
        },
        "runtime_growth": [
            {
                "store": g.store,
                "short_events": g.short_events,
                "long_events": g.long_events,
                "short_s": Figure.of(g.short_s).to_json(),
                "long_s": Figure.of(g.long_s).to_json(),
                "ratio": Figure.of(g.ratios).to_json(),
            }
            for g in headline.growth
        ],
        "rss": [
            {
                "turns": [r.turns_early, r.turns_late],
                "bytes": [r.rss_early, r.rss_late],
                "ratio": r.ratio,
            }
            for r in headline.rss
        ],
        "ratios": ratios,
        # issue 28: abort and steer latency per pair and path, every sample in ms
        "abort_steer_latency": None if interrupts is None else interrupts_json(interrupts),
    }


#: What an RQ job sets up, counted (``python -m bench.rq_job_phases --json``; pinned by
#: tests/bench/test_rq_job_setup.py): counts do not move with the machine's load, so they are
#: stated here rather than measured in each run.
RQ_JOB_SETUP = """## RQ: what a job sets up

Per job of a forking `fxdurable worker` (a work horse per job), counted in the worker and in
its horses over one-turn sessions of the bench agent (`python -m bench.rq_job_phases --jobs 30
--store sqlite`, or `--store redis`, or `--mode nofork`; `--profile DIR` writes a cProfile of
every job, its pool threads included):

| made per job in a horse | before | now |
|---|---|---|
| store schema checked (1) | 1 | 0: once per worker, before its first fork |
| store opened | 1 | Redis 0 (the worker's, reused); SQLite 1 (connections cannot cross a fork) |
| SQLite connections opened | 3.03 | 2.07 (one per pool thread the turn uses) |
| agents loaded (the `FXD_AGENTS` factory) | 1 | 1: a function it names runs per process (2) |
| queue client (RQ, redis-py) | 1 | 0: the worker's (redis-py reconnects per process) |
| tool JSON schemas, record codecs built | each one used | 0: built in the worker |
| event loop, wake handler | 1 | 1: they cannot cross a fork (a lease names the pid) |

(1) SQLite: `SELECT MAX(version)` on a connection of its own; Redis: SETNX, INFO and two
SCRIPT LOADs in one round trip. (2) The module itself is imported once, by the worker.

A `--no-fork` worker (RQ's `SimpleWorker`) makes each of these once for all its jobs. What a
horse still pays beside an RQ no-op job: RQ's fork of a larger process (the worker has
fxdurable and the agents imported), copy-on-write page faults (about 1,400 per job), a thread
pool started per horse (4 threads, one SQLite connection each that a call uses), and the turn
itself (3 model steps and 2 tool calls: 12 commits, each fsynced at `synchronous=FULL`). A
`--no-fork` worker's turn has no setup left: its ratio to RQ's no-op is bounded by the turn's
journal work, and RQ's `SimpleWorker` no-op costs a few milliseconds.

Measured once with it (2026-12-02, 2 cores shared with other work: milliseconds are noisy,
the counts above are not), per job in a horse, before → now:

| per job in a horse | SQLite FULL | Redis |
|---|---|---|
| CPU, all threads | 39.3 → 29.6 ms | 37.0 → 28.2 ms |
| job function (median) | 48.6 → 36.7 ms | 45.4 → 36.4 ms |
| context setup | 5.4 → 2.3 ms | 5.6 → 1.9 ms |
| the turn's CPU (schemas, codecs no longer built per horse) | 30.9 → 24.6 ms | 29.9 → 24.5 ms |
| minor page faults | 2,117 → 1,469 | 2,000 → 1,434 |

`python -m bench.rq_throughput --turns 30 --reps 3 --modes fork`, two runs each, same hour:
turns/s ÷ RQ no-op jobs/s (`rq.Worker`) went from 0.25–0.33 (medians; 1 and 2 workers, both
stores) to 0.32–0.42: the ≥ 0.5 target is not met. What bounds it now is what a horse cannot
share (its fork, page faults, pool threads and their SQLite connections) and the turn itself.
"""


#: The Postgres workers row's workload (issue 27; bench/pg_workers.py), under the step rows'.
PG_WORKERS_NOTE = """The Postgres workers row (issue 27, target ≥ 1000 tool steps/s aggregate): 4 \
`fxdurable worker --queue postgresql://` processes (`--concurrency 1`) with the store and the \
wake queue in one schema of one database on the bench's server (`fsync=on`), running one-turn \
sessions of a ScriptedModel that calls a no-op `replay="safe"` tool K times, one call per \
response, then answers (K tool steps and K + 1 model steps a turn; K = 10 in the default run, \
whose sizes the rest of the run states), admitted one at a time by a \
Runtime in the bench process; beside it, the same on 1 worker, the repetitions alternating. \
Tool steps/s is the turns' tool calls ÷ the wall time from the first admission to the last \
settled submission. Every run is checked from the database: each submission completed in one \
attempt, each turn's model calls and tool calls recorded once and completed after one run, \
each call's effect (a line the tool writes apart from the store) exactly once, the wake queue \
drained. On a 2-core machine the 4 workers and the server share the cores: the figure is \
CPU-bound (the rest of the run says the CPU per turn of the workers, the server and the \
admitting process)."""


def _interrupts_section(interrupts: InterruptLatency | None) -> str:
    """The "Abort and steer latency" section (docs/aborting.md links to its anchor)."""
    if interrupts is None:
        table = "Not measured in this run: `make bench` measures it (`--only headline` does not)."
    else:
        table = f"{interrupts.samples} samples of each kind per row.\n\n" + render_interrupts(
            interrupts
        )
    return f"## Abort and steer latency\n\n{INTERRUPTS_WORKLOAD}\n\n{table}\n"


def _markdown(
    data: dict[str, object],
    headline: Headline,
    report: str,
    interrupts: InterruptLatency | None = None,
) -> str:
    machine = data["machine"]
    assert isinstance(machine, dict)
    versions = data["versions"]
    assert isinstance(versions, dict)
    shown = ", ".join(f"{name} {v or 'not installed'}" for name, v in versions.items())
    modes = "\n".join(
        f"- **{s}**: {MODE_NOTES[s]}; modes: {', '.join(_MODES[s])}." for s in SYSTEMS
    )
    return f"""# Benchmarks

Generated by `make bench` ({data["mode"]} run, {data["generated"]}, {data["elapsed_s"]} s).
Raw figures, with every repetition: [`bench/results/latest.json`](https://github.com/fxdurable/fxdurable/blob/main/bench/results/latest.json).

Every figure is a ratio to a reference measured in the same run on the same machine, from
repetitions that interleave the systems compared; each cell is the median of the repetitions
with their range (min–max). Absolute milliseconds only say what the machine was like.

## How to reproduce

```
make bench              # installs .venv-bench (fxdurable, and DBOS and LangGraph pinned in
                        # bench/requirements-peers.txt), then runs python -m bench --write
make bench ARGS=--quick # fewer repetitions and smaller sessions, for a quick look
```

The peers are installed into `.venv-bench` only; they are never dependencies of fxdurable.
Without them (`python -m bench` in the project's own `.venv`) their columns say
"not installed".

## Machine and versions

- nproc {machine["nproc"]} (cpu_count {machine["cpu_count"]}), {machine["python"]}, \
SQLite {machine["sqlite"]}, {machine["os"]}, databases on {machine["filesystem"]}
- {shown}

## Workloads and modes

N sequential no-op steps in one durable unit, N in {{{", ".join(map(str, headline.ns))}}}; \
the figure is the unit's wall time ÷ N, after an untimed warm-up unit. The ratio of a step row
is the cheaper peer's cost ÷ fxdurable's (target: fxdurable at least 2× cheaper than both),
taken repetition by repetition.

The parallel batch row (issue 23, target ≥ 4): one durable unit of {headline.batch_width} \
concurrent no-op steps on WAL+FULL, per call (the unit's wall time ÷ {headline.batch_width}, \
after an untimed warm-up unit). fxdurable: one turn whose ScriptedModel's first response asks \
for {headline.batch_width} calls of a no-op `replay="safe"` tool (parallel_tools on), then a \
final answer, so its figure includes the turn's two model steps; DBOS: an async workflow \
gathering {headline.batch_width} async `@DBOS.step` steps started in order (DBOS's documented \
way to run steps in parallel); LangGraph: one superstep of {headline.batch_width} nodes fanned \
out from START, `SqliteSaver`, durability "sync".

{PG_WORKERS_NOTE}

{modes}

## Headline

{headline.render()}

{_interrupts_section(interrupts)}
## The rest of the run

```
{report}
```

{RQ_JOB_SETUP}
"""


def write_results(
    headline: Headline,
    *,
    machine: Machine,
    elapsed_s: float,
    ratios: dict[str, object],
    report: str,
    interrupts: InterruptLatency | None = None,
    root: Path = REPO,
) -> tuple[Path, Path]:
    """Write ``bench/results/latest.json`` and ``docs/benchmarks.md`` under ``root``."""
    data = results(
        headline, machine=machine, elapsed_s=elapsed_s, ratios=ratios, interrupts=interrupts
    )
    json_path = root / "bench" / "results" / "latest.json"
    md_path = root / "docs" / "benchmarks.md"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(_markdown(data, headline, report, interrupts))
    return json_path, md_path
