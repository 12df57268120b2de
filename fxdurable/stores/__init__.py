"""Store backends. Open one by URL with :func:`fxdurable.backends.open_store`; the contract is
:class:`fxdurable.core.store.Store`."""
