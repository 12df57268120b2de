"""The store contract suite: what every :class:`~fxdurable.core.store.Store` must do, as pytest
tests a store of your own can run (docs/stores.md).

Subclass :class:`StoreContract` in a test module and give it a ``store`` fixture that yields a
fresh, empty store (and closes it)::

    import pytest
    from fxdurable.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(f"mystore://{tmp_path}")
            yield store
            store.close()

Every test uses only the ``Store`` protocol and the journal on top of it: the four record
primitives called directly (:class:`PrimitiveContract`: run it first), the deletes erasure
uses (:class:`DeleteContract`), conditional writes
and version checks, transactions and rollback, queries and exact round trips, and the journal's
flows (steering, durable steps, questions, state, forks, subagents). Racing writers in real
processes are :mod:`fxdurable.testing.store_race`. Needs pytest (``pip install pytest``).
"""

from __future__ import annotations

from fxdurable.testing.store_contract.deletes import DeleteContract
from fxdurable.testing.store_contract.flows import FlowContract
from fxdurable.testing.store_contract.primitives import PrimitiveContract
from fxdurable.testing.store_contract.reads import ReadContract
from fxdurable.testing.store_contract.writes import WriteContract

__all__ = [
    "DeleteContract",
    "FlowContract",
    "PrimitiveContract",
    "ReadContract",
    "StoreContract",
    "WriteContract",
]


class StoreContract(PrimitiveContract, WriteContract, ReadContract, FlowContract, DeleteContract):
    """Every contract test; a subclass supplies the ``store`` fixture (see the module)."""
