"""The suites' own network guard (network_guard.py, installed by conftest): anything but loopback is refused and
recorded."""

from __future__ import annotations

import logging
import socket
import urllib.request

import conftest
import pytest


def test_connects_and_lookups_beyond_loopback_are_refused_and_recorded():
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with pytest.raises(OSError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open("http://example.com/", timeout=1)
    assert conftest.REFUSED == ["connect ('192.0.2.1', 443)", "resolve 'example.com'"]
    conftest.REFUSED.clear()


def test_loopback_is_allowed(stack):
    with socket.create_connection(("127.0.0.1", int(stack.url.rsplit(":", 1)[1])), timeout=5):
        pass


def test_clients_run_with_a_fresh_home():
    assert conftest.HOME.parent == conftest.SCRATCH
    assert not (conftest.HOME / ".netrc").exists()
    assert not (conftest.HOME / ".config" / "wandb" / "settings").exists()


def test_weave_drop_lines_are_caught():
    """weave reports a refused batch only in its log (weave/trace_server_bindings/http_utils.py)."""
    logger = logging.getLogger("weave.trace_server_bindings.http_utils")
    logger.error("Error sending batch of %s call events to server", 2)
    logger.error("dropped call start ids: %s", ["a", "b"])
    assert conftest.DROPS.lines == [
        "weave.trace_server_bindings.http_utils: Error sending batch of 2 call events to server",
        "weave.trace_server_bindings.http_utils: dropped call start ids: ['a', 'b']",
    ]
    conftest.DROPS.lines.clear()
