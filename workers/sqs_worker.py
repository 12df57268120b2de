"""Deployable entry point of the SQS worker: ``python workers/sqs_worker.py [options]``.

The same as ``fxdurable worker --queue sqs://...`` (see :mod:`fxdurable.workers.sqs_worker`):
a container's command, for images that prefer a script to a console entry point. Options and
environment are the ``worker`` command's; ``--queue`` defaults to ``$FXD_QUEUE``.
"""

from __future__ import annotations

import sys

from fxdurable.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
