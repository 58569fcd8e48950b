"""A Postgres URL in one spelling every connection we open (and DBOS's) reads alike.

libpq accepts several hosts in a URL, so that a client finds the primary of a cluster with a
standby (``target_session_attrs=read-write``). Operators write them three ways:

- before the database: ``postgresql://user@h1:5432,h2:5433/db?target_session_attrs=read-write``
  (libpq's documented form; SQLAlchemy's URL parser cannot read it);
- in the query: ``postgresql://user@/db?host=h1,h2&port=5432,5433``;
- one ``host`` parameter a host: ``postgresql://user@/db?host=h1:5432&host=h2:5433``
  (SQLAlchemy's form; libpq keeps only the last one).

``canonical`` rewrites each into the query form, the one that SQLAlchemy's psycopg dialect,
psycopg (libpq) and DBOS's engine all read as the same list of hosts, and adds a
``connect_timeout`` when the URL sets none: an address that does not answer (a primary whose
host died) then costs that many seconds per host, not the minutes of the TCP stack's retries.
A URL that mixes the forms, or whose ports do not match its hosts, is refused with one line
that names the form to use.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote

from ..errors import ConfigError

__all__ = ["CONNECT_TIMEOUT_SECONDS", "QUERY_FORM", "canonical"]

CONNECT_TIMEOUT_SECONDS = 5
"""The ``connect_timeout`` added to a URL that sets none (libpq: per host tried)."""

QUERY_FORM = "postgresql://user@/db?host=h1,h2&port=5432,5433&target_session_attrs=read-write"
"""The multi-host form the refusals name."""

_DEFAULT_PORT = "5432"


def _refuse(why: str) -> ConfigError:
    return ConfigError(f"The Postgres URL {why}: write several hosts as {QUERY_FORM}")


def _split_host_port(item: str) -> tuple[str, str]:
    """``h``, ``h:p``, ``[v6]`` or ``[v6]:p`` -> (host, port or "")."""
    if item.startswith("["):
        host, _, after = item[1:].partition("]")
        if after and not after.startswith(":"):
            raise _refuse(f"has a malformed host {item!r}")
        return host, after[1:]
    if item.count(":") == 1:
        host, _, port = item.partition(":")
        return host, port
    return item, ""


def _check_port(port: str) -> str:
    if port and not port.isdigit():
        raise _refuse(f"has a port that is not a number ({port!r})")
    return port


def _listed(names: list[str], ports: list[str]) -> list[tuple[str, str]]:
    """``host=h1,h2&port=p1,p2`` (one port for all, or one a host)."""
    if len(ports) > 1:
        raise _refuse("repeats its port= parameter")
    each = ports[0].split(",") if ports else [""]
    if len(each) == 1:
        each = each * len(names)
    if len(each) != len(names):
        raise _refuse(f"names {len(names)} hosts and {len(each)} ports")
    return list(zip(names, each, strict=True))


def _repeated(hosts: list[str], ports: list[str]) -> list[tuple[str, str]]:
    """``host=h1:p1&host=h2:p2``."""
    if ports:
        raise _refuse("gives ports both in its host=h:p parameters and in port=")
    if any("," in h for h in hosts):
        raise _refuse("mixes host=h1,h2 with repeated host= parameters")
    return [_split_host_port(h) for h in hosts]


def _hosts_of(
    netloc_hosts: str, query_hosts: list[str], query_ports: list[str]
) -> list[tuple[str, str]] | None:
    """The (host, port) list of a URL naming several hosts, or ``None`` for one host."""
    before = netloc_hosts.split(",") if netloc_hosts else []
    several_in_query = len(query_hosts) > 1 or (query_hosts and "," in query_hosts[0])
    if (len(before) > 1 or several_in_query) and before and (query_hosts or query_ports):
        raise _refuse("names hosts both before the database and in its query")
    if len(before) > 1:
        pairs = [_split_host_port(h) for h in before]
    elif len(query_hosts) > 1:
        pairs = _repeated(query_hosts, query_ports)
    elif several_in_query:
        pairs = _listed(query_hosts[0].split(","), query_ports)
    else:
        return None
    return _checked(pairs)


def _checked(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every host named, every port a number (the default where none is given)."""
    if any(not host for host, _ in pairs):
        raise _refuse("has an empty host in its list")
    return [(host, _check_port(port) or _DEFAULT_PORT) for host, port in pairs]


def _values(params: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in params if k == key]


def canonical(rest: str) -> str:
    """``rest`` (a Postgres URL after ``scheme://``) in the query form when it names several
    hosts, with a ``connect_timeout`` when it sets none; a one-host URL keeps its spelling.

    Raises:
        ConfigError: the URL mixes multi-host forms, or its ports do not match its hosts.
    """
    head, qmark, query = rest.partition("?")
    netloc, slash, path = head.partition("/")
    userinfo, at, hostspec = netloc.rpartition("@")
    params = parse_qsl(query, keep_blank_values=True) if qmark else []
    pairs = _hosts_of(hostspec, _values(params, "host"), _values(params, "port"))
    timed = any(k == "connect_timeout" for k, _ in params)
    if pairs is None:
        if timed:
            return rest
        extra = f"connect_timeout={CONNECT_TIMEOUT_SECONDS}"
        return f"{rest}&{extra}" if query else f"{head}?{extra}"
    if not timed:
        params.append(("connect_timeout", str(CONNECT_TIMEOUT_SECONDS)))
    return f"{userinfo}{at}{slash}{path}?{_query_form(pairs, params)}"


def _query_form(pairs: list[tuple[str, str]], params: list[tuple[str, str]]) -> str:
    """``host=h1,h2&port=p1,p2`` and the other parameters, encoded."""
    others = [(k, v) for k, v in params if k not in ("host", "port")]
    listed = [
        ("host", ",".join(h for h, _ in pairs)),
        ("port", ",".join(p for _, p in pairs)),
        *others,
    ]
    return "&".join(f"{k}={quote(v, safe=',:/')}" for k, v in listed)
