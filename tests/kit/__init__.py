"""The crash suites' shared kit: the story agent and its outside world (:mod:`tests.kit.story`),
and reading that world back with the invariants every suite checks (:mod:`tests.kit.world`).

Used by the embedded crash suite (``tests/crash/``), the RQ worker suite (``tests/workers/``)
and the HTTP suite (``tests/http/``). Imported as ``tests.kit``: pytest puts the repository
root on ``sys.path`` (``pythonpath = ["."]``), and every process the suites start gets it on
``PYTHONPATH``.
"""
