"""Wake queues. Open one by URL with :func:`fxdurable.backends.open_queue`; the contract is
:class:`fxdurable.core.queue.WakeQueue`."""
