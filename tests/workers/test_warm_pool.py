"""The warm context's thread pool starts a thread only when every thread it has is busy."""

from __future__ import annotations

import threading

from fxdurable.workers.warm import ReusingThreadPool

WAIT_S = 10.0


def test_a_call_submitted_as_the_last_one_finishes_reuses_its_thread() -> None:
    # Each call is submitted from the previous one's done callback: the moment an awaiting
    # loop submits its next store call, before the finishing thread has said it is idle.
    # CPython's pool starts a thread there every time (up to max_workers).
    pool = ReusingThreadPool(max_workers=8)
    done = threading.Event()

    def chain(left: int) -> None:
        if left == 0:
            done.set()
            return
        pool.submit(lambda: None).add_done_callback(lambda _: chain(left - 1))

    try:
        chain(20)
        assert done.wait(WAIT_S)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown(wait=True)


def test_concurrent_calls_get_threads_of_their_own() -> None:
    pool = ReusingThreadPool(max_workers=8)
    release, second_ran = threading.Event(), threading.Event()
    try:
        blocked = pool.submit(release.wait, WAIT_S)
        pool.submit(second_ran.set)
        assert second_ran.wait(WAIT_S)  # not queued behind the blocked call
        release.set()
        assert blocked.result(WAIT_S)
        assert len(pool._threads) == 2
    finally:
        release.set()
        pool.shutdown(wait=True)
