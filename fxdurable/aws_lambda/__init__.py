"""fxdurable on AWS Lambda: the functions the SAM template names by their ``handler``
(``fxdurable.aws_lambda.http.handler`` and so on; ``handlers/*_lambda.py`` re-export them).

- :mod:`~fxdurable.aws_lambda.http` — the HTTP API behind API Gateway (HTTP API, payload
  v2), through Mangum, in *receipt* mode: ``POST /chat`` admits, enqueues a wake on SQS and
  answers 202 with ``sessionId``, ``submissionId`` and ``cursor``; ``GET /chat`` long-polls
  for the lines after a cursor. It never runs a turn itself.
- :mod:`~fxdurable.aws_lambda.wake` — subscribed to the SQS queue: runs each woken session
  until it rests or the invocation's remaining time (minus ``FXD_LAMBDA_MARGIN_S``) runs out,
  enqueues the continuation, lets the lease go, and reports the records that failed
  (``batchItemFailures``).
- :mod:`~fxdurable.aws_lambda.scan` — on a schedule: wakes sessions with unsettled work and
  no live lease (a killed invocation's, or one whose wake was lost).

Each module imports only what its function needs, so a cold start pays for nothing else;
this package's ``__init__`` imports nothing. Needs ``pip install 'fxdurable[lambda]'``.
:mod:`~fxdurable.aws_lambda.project` writes a user's project (``fxdurable init lambda``) and
assembles what its functions ship (``fxdurable stage lambda``).
"""
