"""``test_live_providers.py`` runs one turn per provider against the real APIs; it is collected
only with ``FXD_LIVE_TESTS=1`` (so the default suite neither runs nor skips it), and each
provider runs only when its key is set (skipped, naming the key, otherwise)."""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("FXD_LIVE_TESTS") == "1" else ["test_live_providers.py"]
