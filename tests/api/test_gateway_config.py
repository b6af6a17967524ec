"""``create_app`` takes one ``GatewayConfig``; the handlers get its parts by name, not from ``app.state``."""

from __future__ import annotations

from collections.abc import Callable

from litestar import Litestar
from litestar.di import Provide


def test_the_gateway_keeps_nothing_in_the_apps_state(make_app: Callable[..., Litestar]) -> None:
    app = make_app()
    assert dict(app.state) == {}


def test_each_part_is_a_value_made_once_and_read_on_the_event_loop(make_app: Callable[..., Litestar]) -> None:
    """The request path resolves each part from Litestar's cache: no call per request, no thread hop."""
    app = make_app()
    assert set(app.dependencies) == {"card", "binding", "audit", "files", "prometheus"}
    for name, provide in app.dependencies.items():
        assert isinstance(provide, Provide), name
        assert provide.use_cache, name
        assert not provide.sync_to_thread, name
        assert provide.has_sync_callable, name
