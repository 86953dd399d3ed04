"""The Python suites' network guard (test/python, test/wandb): importing it makes every socket connect and name
lookup that would leave the machine raise ConnectionRefusedError and be recorded in REFUSED, which each suite's
conftest checks after every test. Loopback addresses and `localhost` pass; address literals need no lookup."""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

REFUSED: list[str] = []
_lock = threading.Lock()


def _is_loopback(host: Any) -> bool:
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
        return True
    except ValueError:
        return False


def _refuse(what: str) -> None:
    with _lock:
        REFUSED.append(what)
    raise ConnectionRefusedError(f"non-loopback network access refused in the tests: {what}")


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
        _refuse(f"connect {address!r}")


_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(self, address)
    return _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(self, address)
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any):
    """Name lookups leave the machine (DNS): only loopback names."""
    if isinstance(host, bytes):
        host = host.decode()
    if host is not None and not _is_loopback(host) and not _is_address(host):
        _refuse(f"resolve {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo  # type: ignore[assignment]
