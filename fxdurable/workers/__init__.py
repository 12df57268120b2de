"""Worker entry points: the RQ job and ``fxdurable worker`` (deployables live in ../workers/)."""
