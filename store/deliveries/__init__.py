"""Webhook deliveries: the record of every delivery and attempt, and the SSRF guard on push URLs.

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use: the store's packages import each other's modules, so an eager face would
import in a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.deliveries.push_urls import check_push_url as check_push_url
    from store.deliveries.push_urls import is_public as is_public
    from store.deliveries.push_urls import literal_address as literal_address
    from store.deliveries.records import DELIVERIES as DELIVERIES
    from store.deliveries.records import DELIVERY_STATES as DELIVERY_STATES
    from store.deliveries.records import Attempt as Attempt
    from store.deliveries.records import Delivery as Delivery
    from store.deliveries.records import DeliveryRecorder as DeliveryRecorder
    from store.deliveries.records import DeliveryState as DeliveryState
    from store.deliveries.records import Finished as Finished
    from store.deliveries.records import NewDelivery as NewDelivery
    from store.deliveries.records import Recorded as Recorded
    from store.deliveries.records import deliveries_of as deliveries_of
    from store.deliveries.records import delivery_counts as delivery_counts
    from store.deliveries.records import task_deliveries as task_deliveries

_HOMES = {
    "Attempt": "store.deliveries.records",
    "DELIVERIES": "store.deliveries.records",
    "DELIVERY_STATES": "store.deliveries.records",
    "Delivery": "store.deliveries.records",
    "DeliveryRecorder": "store.deliveries.records",
    "DeliveryState": "store.deliveries.records",
    "Finished": "store.deliveries.records",
    "NewDelivery": "store.deliveries.records",
    "Recorded": "store.deliveries.records",
    "check_push_url": "store.deliveries.push_urls",
    "deliveries_of": "store.deliveries.records",
    "delivery_counts": "store.deliveries.records",
    "is_public": "store.deliveries.push_urls",
    "literal_address": "store.deliveries.push_urls",
    "task_deliveries": "store.deliveries.records",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
