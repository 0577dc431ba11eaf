"""The test proxy survives being stopped while connections are being opened.

A ``stop()`` that closed a relayed socket before its pump thread registered it raised
``ValueError: Invalid file descriptor: -1`` in that thread, which pytest turns into a
failure of whichever test happened to be running (it failed a CI run of the fault suite).
"""

from __future__ import annotations

import socket
import threading
import time

from tests.e2e.proxy import TcpProxy
from tests.polling import join_or_fail


def _echo_server() -> tuple[socket.socket, threading.Event]:
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, done


def test_stopping_while_connections_open_raises_in_no_thread() -> None:
    server, done = _echo_server()
    failures: list[BaseException | None] = []
    previous = threading.excepthook

    def record(args: threading.ExceptHookArgs) -> None:
        failures.append(args.exc_value)

    threading.excepthook = record
    try:
        proxy = TcpProxy(server.getsockname()[:2])
        for round_ in range(150):
            proxy.start()
            opened: list[socket.socket] = []

            def connect(port: int = proxy.port, opened: list[socket.socket] = opened) -> None:
                try:
                    opened.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                except OSError:
                    pass

            clients = [threading.Thread(target=connect) for _ in range(8)]
            for client in clients:
                client.start()
            time.sleep(0.001 * (round_ % 4))
            proxy.stop()
            join_or_fail(*clients, what="the clients")
            for sock in opened:
                sock.close()
        time.sleep(0.6)  # a pump thread notices stop() within its 0.5 s select timeout
    finally:
        threading.excepthook = previous
        done.set()
        server.close()
    assert failures == []
