"""``VMLEDGER_DATABASE_URL`` taken apart once, by one set of rules, for every user of it: the
settings' validation, the event store's parameters and the command line's first connection
(docs/operations.md, "Settings"). They used to parse it each in its own way, so that a URL
one read as valid another read differently (an empty database name, which libpq replaces
with the user's name: the ``postgres`` maintenance database).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from service.redaction import remember_secret

#: What a bad URL's message ends with when a character of the password may be to blame: a
#: password is never shown, so the message can only say how to write one.
_ENCODE = ("percent-encode any of @ : / ? # [ ] % in the password (%40 for @, %23 for #, "
           "...) and put an IPv6 address in brackets ([::1])")


@dataclass(frozen=True)
class PostgresTarget:
    """Where a ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME`` URL points: USER defaults
    to ``postgres``, HOST to ``127.0.0.1``, PORT to 5432; user, password and database name
    are percent-decoded, as libpq decodes them."""

    host: str
    port: int
    user: str
    password: str
    dbname: str

    def connect_kwargs(self) -> dict[str, str | int]:
        """``psycopg.connect``'s keyword arguments: the same parameters the event store is
        given (``Settings.eventsourcing_env``), not libpq's own reading of the URL."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "password": self.password, "dbname": self.dbname}


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///PATH`` URL. Raises ``ValueError`` when it names none, when
    the path has spaces around it (``sqlite:///a.db `` made a file named "a.db "), or when
    it names an in-memory database (``:memory:``, ``file:...?mode=memory``), which each of
    the service's connections would make anew, empty: the service accepted writes it could
    never read back."""
    path = url.removeprefix("sqlite:///")
    if not path.strip():
        raise ValueError("names no file: sqlite:///PATH, e.g. sqlite:///vmledger.db")
    if path != path.strip():
        raise ValueError("has spaces around the file's name: remove them (a file name that "
                         "begins or ends with a space is taken for a mistake)")
    if ":memory:" in path or "mode=memory" in path:
        raise ValueError("names an in-memory database, which each connection makes anew and "
                         "empty (what one writes, the others never read): name a file, e.g. "
                         "sqlite:///vmledger.db")
    return path


def postgres_target(url: str) -> PostgresTarget:
    """The parts of a ``postgresql://`` (or ``postgres://``) URL. Raises ``ValueError`` with
    a message that never holds the URL itself (it may hold a password): the URL cannot be
    split (unbalanced IPv6 brackets), its port is not a number from 1 to 65535, it has a
    query or a fragment (which vmledger would ignore: libpq's other parameters, such as
    ``sslmode``, come from its ``PG*`` environment variables, which every connection
    vmledger makes reads), its host is a Unix-domain socket's directory (``%2Frun%2F
    postgresql``: not supported), or it names no database (libpq would
    then use the user's name, and the tables would go into the ``postgres`` maintenance
    database)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        problem = "the port must be a number from 1 to 65535" if "Port" in str(error) \
            else "cannot be read as a URL"
        raise ValueError(f"{problem} (the form is postgresql://USER[:PASSWORD]@HOST[:PORT]"
                         f"/DBNAME; {_ENCODE})") from None
    if port == 0:  # urlsplit allows it; libpq cannot connect to it
        raise ValueError("the port must be a number from 1 to 65535")
    if parts.query or parts.fragment:
        raise ValueError(f"has a query (?...) or fragment (#...), which vmledger would "
                         f"ignore (the form is postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME; "
                         f"{_ENCODE}); give libpq's other connection parameters in its "
                         f"environment variables instead, e.g. PGSSLMODE=require, "
                         f"PGSSLROOTCERT=PATH, PGAPPNAME=NAME")
    if "/" in unquote(parts.hostname or ""):
        # libpq reads a host that is a path as a Unix-domain socket's directory; the event
        # store's pool and our first connection would resolve it as a name, and fail later
        raise ValueError("names a Unix-domain socket's directory as HOST, which vmledger "
                         "does not support: give the server's address (127.0.0.1 for a "
                         "local server)")
    dbname = unquote(parts.path.removeprefix("/"))
    if not dbname.strip():
        raise ValueError("names no database: add /DBNAME (postgresql://USER[:PASSWORD]@HOST"
                         "[:PORT]/DBNAME), the database vmledger keeps its tables in")
    password = unquote(parts.password or "")
    for secret in (password, parts.password or ""):  # as given, and percent-decoded
        remember_secret(secret)  # no message the process shows may hold it
    return PostgresTarget(host=parts.hostname or "127.0.0.1", port=port or 5432,
                          user=unquote(parts.username or "postgres"),
                          password=password, dbname=dbname)
