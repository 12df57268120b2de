"""The ``fxdurable`` command line."""
