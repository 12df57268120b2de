"""The web console: static files only (``static/``), served by ``fxdurable serve`` at
``/console``. Plain ES modules, no build step; it talks to the public HTTP API alone, so it
works against any deployment. This module is a marker that makes the files package data."""
