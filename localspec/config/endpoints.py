"""The --rpc value: 'host:port,host:port' (or a TOML list), parsed and checked in one place."""

from __future__ import annotations

from typing import Sequence

from localspec.errors import LocalspecError


def parse_endpoints(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """'host:port,host:port' (or a list of them) -> the endpoints, validated."""
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in (s.strip() for s in items):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise LocalspecError(f"--rpc wants HOST:PORT[,HOST:PORT...]; {item!r} is not HOST:PORT")
        if item not in out:
            out.append(item)
    return tuple(out)
