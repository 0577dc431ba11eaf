"""The TCP proxy that cuts a broker: once stopped, nothing can connect through it (a
regression: close() alone left the listening socket accepting while its accept thread
was blocked, so an "outage" was no outage for new connections)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.e2e.proxy import TcpProxy


def test_a_stopped_proxy_refuses_connections_and_starts_again_on_its_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        proxy = TcpProxy(upstream.getsockname())
        proxy.start()
        port = proxy.port
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        time.sleep(0.3)  # the accept thread is back in accept(), as it is most of the time
        proxy.stop()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        proxy.start()
        try:
            assert proxy.port == port
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        finally:
            proxy.stop()
