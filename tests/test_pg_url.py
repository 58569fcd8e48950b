"""Every multi-host form libpq or SQLAlchemy reads becomes one spelling that each of our
connections (SQLAlchemy's engines, psycopg's lean pools) and DBOS's engine read as the same
hosts; a URL that mixes the forms is refused with one line naming the form to use; every
Postgres URL gets a connect timeout unless it sets one (``helix_dbos/core/pg_url.py``)."""

from __future__ import annotations

import psycopg.conninfo
import pytest
import sqlalchemy as sa
from dbos._dbos_config import process_config

from helix_dbos.config import HelixSettings, parse_database_url
from helix_dbos.core.pg_url import CONNECT_TIMEOUT_SECONDS, QUERY_FORM
from helix_dbos.errors import ConfigError

#: The three forms of one two-host URL, as operators write them.
FORMS = {
    "before the database": (
        "postgresql://alice:s%40cret@db1.internal:5441,db2.internal:5442/app"
        "?target_session_attrs=read-write"
    ),
    "query lists": (
        "postgresql://alice:s%40cret@/app?host=db1.internal,db2.internal&port=5441,5442"
        "&target_session_attrs=read-write"
    ),
    "repeated host": (
        "postgres://alice:s%40cret@/app?host=db1.internal:5441&host=db2.internal:5442"
        "&target_session_attrs=read-write"
    ),
}

HOSTS = "db1.internal,db2.internal"
PORTS = "5441,5442"


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_reads_as_both_hosts_in_every_driver(form: str) -> None:
    """libpq (the lean pools), SQLAlchemy's psycopg dialect (our engines, migrate's) and
    DBOS's engine each see both hosts with their ports, the options and the password."""
    urls = parse_database_url(FORMS[form])
    # libpq, as the lean pools and the LISTEN connection open it.
    info = psycopg.conninfo.conninfo_to_dict(urls.user)
    assert (info["host"], info["port"]) == (HOSTS, PORTS)
    assert info["target_session_attrs"] == "read-write"
    assert (info["user"], info["password"], info["dbname"]) == ("alice", "s@cret", "app")
    # SQLAlchemy's sync (migrate) and async (the store) engines.
    for url in (urls.sync, urls.async_):
        made = sa.make_url(url)
        _, kwargs = sa.create_engine(made).dialect.create_connect_args(made)
        assert (kwargs["host"], kwargs["port"]) == (HOSTS, PORTS)
        assert kwargs["target_session_attrs"] == "read-write"
        assert kwargs["password"] == "s@cret"
    # The lean pools' URL is the store engine's, rendered back (store/engine.py).
    rendered = sa.make_url(urls.async_).set(drivername="postgresql")
    again = psycopg.conninfo.conninfo_to_dict(rendered.render_as_string(hide_password=False))
    assert (again["host"], again["port"]) == (HOSTS, PORTS)
    # DBOS: its config processing and the engine its system database builds.
    config = process_config(data={"name": "helix-test", "system_database_url": urls.dbos})
    assert config["system_database_url"] is not None
    dbos_url = sa.make_url(config["system_database_url"]).set(drivername="postgresql+psycopg")
    _, kwargs = sa.create_engine(dbos_url).dialect.create_connect_args(dbos_url)
    assert (kwargs["host"], kwargs["port"]) == (HOSTS, PORTS)
    database = config["database"]
    assert database is not None
    engine_kwargs = database.get("sys_db_engine_kwargs") or {}
    assert engine_kwargs["connect_args"]["connect_timeout"] == CONNECT_TIMEOUT_SECONDS


def test_the_forms_agree_and_parsing_twice_changes_nothing() -> None:
    """One spelling for all three; the runtime parses the URL more than once."""
    spelled = {parse_database_url(url).user for url in FORMS.values()}
    assert len(spelled) == 1
    (one,) = spelled
    assert parse_database_url(one).user == one


def test_a_host_without_a_port_gets_the_default() -> None:
    urls = parse_database_url("postgresql://u@db1,db2:5433/app")
    info = psycopg.conninfo.conninfo_to_dict(urls.user)
    assert (info["host"], info["port"]) == ("db1,db2", "5432,5433")


def test_one_port_for_several_hosts_applies_to_each() -> None:
    urls = parse_database_url("postgresql://u@/app?host=db1,db2&port=6432")
    info = psycopg.conninfo.conninfo_to_dict(urls.user)
    assert info["port"] == "6432,6432"


def test_ipv6_hosts_keep_their_ports() -> None:
    urls = parse_database_url("postgresql://u@[fd00::1]:5441,[fd00::2]:5442/app")
    info = psycopg.conninfo.conninfo_to_dict(urls.user)
    assert (info["host"], info["port"]) == ("fd00::1,fd00::2", "5441,5442")


def test_a_connect_timeout_the_url_sets_is_kept() -> None:
    urls = parse_database_url("postgresql://u@db1:5441,db2:5442/app?connect_timeout=17")
    info = psycopg.conninfo.conninfo_to_dict(urls.user)
    assert info["connect_timeout"] == "17"
    one = parse_database_url("postgresql://u@db/app?connect_timeout=3")
    assert one.user == "postgresql://u@db/app?connect_timeout=3"


def test_a_one_host_url_gets_a_connect_timeout() -> None:
    urls = parse_database_url("postgresql://u@db:5432/app")
    assert urls.user == f"postgresql://u@db:5432/app?connect_timeout={CONNECT_TIMEOUT_SECONDS}"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@db1,db2/app?host=db3",  # hosts before the database and in the query
        "postgresql://u@/app?host=db1,db2&port=1,2,3",  # ports do not match the hosts
        "postgresql://u@/app?host=db1:1&host=db2&port=3",  # host=h:p and port= together
        "postgresql://u@/app?host=db1,db2&host=db3",  # a list and a repeat together
        "postgresql://u@db1:x,db2/app",  # a port that is no number
        "postgresql://u@db1,,db2/app",  # an empty host
    ],
)
def test_a_mixed_or_malformed_multi_host_url_is_refused_in_one_line(url: str) -> None:
    """At startup (settings), with one line that names the form to use."""
    with pytest.raises(ConfigError) as raised:
        HelixSettings(database_url=url)
    message = str(raised.value)
    assert "\n" not in message
    assert QUERY_FORM in message
