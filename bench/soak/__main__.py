"""``python -m bench.soak``: soak every pair (or ``SOAK_PAIRS``), print one line per pair,
write the JSON report, exit 1 if any pair failed.

Environment (each also a flag): ``SOAK_S`` seconds of faults per pair (default 80: with
start-up, settling and the verdict, the four pairs take under 10 minutes), ``SOAK_PAIRS``
(comma-separated, of sqlite-rq, redis-rq, dynamodb-sqs, sqlite-embedded), ``SOAK_SEED``
(replays a run's decisions; random and printed by default), ``SOAK_WORKERS`` (2),
``SOAK_SESSIONS`` (4), ``SOAK_DIR`` (``.soak``: each pair's logs, ledgers and store, replaced
by the next run) and ``SOAK_OUT`` (``$SOAK_DIR/soak.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from bench.redis_server import unavailable_reason
from bench.soak.pairs import PAIRS
from bench.soak.run import SoakConfig, soak_pair


def _parse(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=float(env("SOAK_S") or 80))
    parser.add_argument("--pairs", default=env("SOAK_PAIRS") or ",".join(PAIRS))
    parser.add_argument("--seed", type=int, default=int(env("SOAK_SEED") or 0) or None)
    parser.add_argument("--workers", type=int, default=int(env("SOAK_WORKERS") or 2))
    parser.add_argument("--sessions", type=int, default=int(env("SOAK_SESSIONS") or 4))
    parser.add_argument("--dir", type=Path, default=Path(env("SOAK_DIR") or ".soak"))
    out = env("SOAK_OUT")
    parser.add_argument("--out", type=Path, default=Path(out) if out else None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown or not pairs:
        print(
            f"SOAK_PAIRS: unknown pair(s) {unknown or pairs}; choose from {', '.join(PAIRS)}",
            file=sys.stderr,
        )
        return 2
    needs_redis = {"sqlite-rq", "redis-rq"} & set(pairs)
    reason = unavailable_reason() if needs_redis else None
    if reason is not None:
        print(
            f"soak: {', '.join(sorted(needs_redis))} need redis-server: {reason}", file=sys.stderr
        )
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    config = SoakConfig(
        seconds=args.seconds, seed=seed, workers=args.workers, sessions=args.sessions
    )
    print(
        f"soak: seed {seed} (SOAK_SEED={seed} replays it), {args.seconds:g} s per pair, "
        f"pairs {', '.join(pairs)}",
        flush=True,
    )
    shutil.rmtree(args.dir, ignore_errors=True)
    results = []
    started = time.monotonic()
    for name in pairs:
        result = soak_pair(name, config, args.dir / name)
        results.append(result)
        print(result.summary(), flush=True)
        for violation in result.violations[:20]:
            print(f"  {violation}", flush=True)
    out = args.out or args.dir / "soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "seed": seed,
        "seconds_per_pair": args.seconds,
        "lease_ttl_s": config.lease_ttl_s,
        "elapsed_s": round(time.monotonic() - started, 1),
        "pairs": [r.as_json() for r in results],
        "result": "PASS" if all(r.passed for r in results) else "FAIL",
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"soak: {report['result']} in {report['elapsed_s']:g} s; report {out}", flush=True)
    return 0 if report["result"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
