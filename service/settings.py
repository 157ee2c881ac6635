"""Settings from the environment (prefix ``VMLEDGER_``) or a ``.env`` file.

Every setting is listed in ``docs/operations.md``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.database_url import PostgresTarget, postgres_target, sqlite_path

#: The largest TCP port. Every port a process listens on (``serve --port``,
#: ``VMLEDGER_METRICS_ADDRESS``) is 0 (a free one, which the process logs) to this: past it
#: ``socket.bind`` raises ``OverflowError`` and uvicorn's own bind wraps the port round.
MAX_PORT = 65535

#: The longest duration a ``*_s`` setting takes: a year.
MAX_SECONDS = 31_536_000
# VMLEDGER_METRICS_ADDRESS: HOST:PORT, an IPv6 host in brackets, an empty host 127.0.0.1
_METRICS_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):[0-9]{1,5}")


class EnvFileError(ValueError):
    """The ``.env`` file of the working directory cannot be read as settings; the message
    names it and says why."""


def not_utf8(error: UnicodeDecodeError) -> str:
    """A configuration file's decoding error in words: the byte, where, and the fix."""
    byte = error.object[error.start:error.start + 1].hex()
    return (f"is not UTF-8 text (byte 0x{byte} at offset {error.start}): save it as UTF-8")


class Settings(BaseSettings):
    """Everything an operator can configure (api.md, "Running and configuration")."""

    model_config = SettingsConfigDict(env_prefix="VMLEDGER_", env_file=".env",
                                      env_file_encoding="utf-8", extra="ignore")

    def __init__(self, **values: Any) -> None:
        """Read the settings from ``values``, the environment and ``.env``. Raises
        ``EnvFileError`` when ``.env`` is not UTF-8 text (a latin-1 byte in a comment ended
        every command in a traceback), pydantic's ``ValidationError`` for a bad value."""
        try:
            super().__init__(**values)
        except UnicodeDecodeError as error:  # .env is the one file read here
            raise EnvFileError(f".env ({Path('.env').resolve()}): {not_utf8(error)}"
                               ) from None

    database_url: str = Field(
        "sqlite:///vmledger.db",
        description="sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME "
        "(postgres:// too)",
    )
    driver: Literal["simulated"] = "simulated"
    public_url: str | None = Field(
        None, description="this service's URL as its clients reach it (http[s]://HOST[:PORT]"
        "[/PATH]): what an accepted command's workflow-api header names; unset, the address "
        "the request was accepted on, never the client's Host header")
    tokens_file: Path | None = Field(
        None, description="the bearer-token file (TOML, or JSON if it ends in .json)")
    tokens: str | None = Field(
        None, description="the bearer tokens as JSON: a list of the tokens file's entries "
        "(not together with tokens_file)")
    sim_servers: int = Field(8, ge=1, le=10_000, description="simulated compute nodes")
    sim_server_ram_mib: int = Field(262_144, ge=1, description="RAM of each simulated server")
    # 8 x 512 CPUs hold 4,096 VMs of one CPU (VMAPI's own tests create 1,001 at once;
    # docs/simulation.md, "What the default fleet holds").
    sim_server_cpus: int = Field(512, ge=1, description="CPUs of each simulated server")
    sim_latency_s: float = Field(0.0, ge=0, description="delay of each simulated operation")
    read_timeout_s: float = Field(
        5.0, gt=0, description="how long a GET waits for read models to catch up before 503"
    )
    projection_poll_s: float = Field(0.05, gt=0, description="projection runner poll interval")
    rebuild_processes: int = Field(
        1, ge=1, le=8, description="processes `vmledger rebuild` builds the read models in")
    worker_poll_s: float = Field(0.2, gt=0, description="job worker poll interval")
    job_lease_s: float = Field(30.0, gt=0, description="how long a claimed job is held")
    job_step_attempts: int = Field(
        3, ge=1, le=20, description="tries of a failing compute call within one job step"
    )
    job_max_attempts: int = Field(
        3, ge=1, le=20, description="workers a job may be started by (takeovers) before it fails"
    )
    stuck_transient_s: float = Field(
        3600.0, gt=0, description="a VM provisioning longer than this is stuck (quarantined)")
    stuck_job_s: float = Field(
        3600.0, gt=0, description="a job running longer than this leaves its VM stuck")
    stuck_check_s: float = Field(30.0, gt=0, description="how often workers look for stuck VMs")
    unique_aliases: bool = Field(
        False, description="refuse a CreateVm or UpdateVm naming an alias an active VM of its "
        "owner has (VMAPI's validateUniqueAlias), recording which VMs hold which alias; off "
        "(the default: Triton's own tests seed duplicate aliases through the API), nothing "
        "about aliases is read or written")
    command_retries: int = Field(
        30, ge=1, description="attempts at a command that meets another writer's conflict"
    )
    idempotency_ttl_s: float = Field(
        86_400.0, ge=86_400, description="how long an Idempotency-Key is kept (s, at least 24 h)"
    )
    aggregate_cache_size: int = Field(
        10_000, ge=0, description="VMs kept in memory per process: a load reads only the "
        "stream's newer events, and a command on a VM this process saved last reads none "
        "(0: off)"
    )
    postgres_pool_size: int = Field(5, ge=1)
    postgres_max_overflow: int = Field(10, ge=0)
    postgres_lock_timeout_s: int = Field(5, ge=1, description="wait for the events table lock")
    postgres_pool_wait_s: float = Field(
        1.0, gt=0, le=30, description="how long a call waits for a pooled connection (s)")
    postgres_connect_timeout_s: int = Field(
        2, ge=2, le=60, description="how long a new connection may take to open (s)")
    postgres_network_timeout_s: float = Field(
        2.0, ge=1, le=60, description="how long a connection may go unanswered (unacknowledged "
        "data, keepalives) before it is dropped (s): a silent partition is an error this soon")
    postgres_request_wait_s: float = Field(
        2.0, gt=0, le=60, description="how long a database call made for an HTTP request "
        "waits for the server's answer before the request is answered 503 (s)")
    postgres_statement_timeout_s: float = Field(
        30.0, gt=0, description="the longest statement the server runs for us (s)")
    database_retry_s: float = Field(
        1.0, ge=0, le=30, description="how long a failed event-store call is retried before "
        "its error is the answer (s; a job's worker goes on retrying while its lease holds)")
    ping_timeout_s: float = Field(
        1.5, gt=0, le=30, description="how long /ping waits for its database probe (s)")
    embedded_runners: bool | None = Field(
        None,
        description="run the projection runner and job worker inside `serve` "
        "(default: yes on SQLite, no on PostgreSQL where `project` and `work` run apart)",
    )
    changes_max_streams: int = Field(
        100, ge=1, description="change streams (GET /changes, /changefeeds) one process serves")
    changes_buffer: int = Field(
        10_000, ge=1, description="changes a stream may have waiting before it is cut")
    changes_heartbeat_s: float = Field(15.0, gt=0, description="idle time before a heartbeat")
    changes_poll_s: float = Field(
        0.5, gt=0, description="how often change streams read the log without a wake-up")
    changes_registration_timeout_s: float = Field(
        10.0, gt=0, description="how long a /changefeeds WebSocket may take to send its "
        "registration before it is closed")
    changes_gap_timeout_s: float = Field(
        60.0, gt=0, description="how long the changefeed waits for a missing log position "
        "still in flight (a transaction left open) before it passes it")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="request body size limit")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "INFO", description="the lowest level logged (any case)")
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line; text: for a terminal")
    opentelemetry: bool = Field(
        False, description="let FastAPI record OpenTelemetry traces, metrics and logs of each "
        "request through the process's configured providers (off: the service's metrics are "
        "Prometheus's, at /metrics, and FastAPI's per-request check for providers costs CPU)")
    metrics_address: str | None = Field(
        None,
        description="HOST:PORT where `vmledger project` or `vmledger work` serves its "
        "process's metrics (unset: none)")

    @field_validator("metrics_address", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # VMLEDGER_METRICS_ADDRESS= (set, but empty) means unset, as docs/operations.md says
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("metrics_address")
    @classmethod
    def _port_in_range(cls, address: str | None) -> str | None:
        # a validator, not a Field pattern: pydantic's refusal of a pattern prints the regex
        # (operator tester), where the settings table promises a line saying the form
        if address is not None and not _METRICS_ADDRESS.fullmatch(address):
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9100 ([::1]:9100 for IPv6)")
        if address is not None and int(address.rpartition(":")[2]) > MAX_PORT:
            raise ValueError(f"the port must be 0 to {MAX_PORT}")
        return address

    @field_validator("*", mode="before")
    @classmethod
    def _a_duration_is_a_number(cls, value: object, info: ValidationInfo) -> object:
        # before the bounds: "nan" was answered "Input should be greater than 0" (operator
        # tester), as if a smaller number were wanted
        if (info.field_name or "").endswith("_s") and isinstance(value, str | float):
            try:
                number = float(value)
            except ValueError:
                return value  # not a number at all: pydantic's own words say so
            if not math.isfinite(number):
                raise ValueError(f"must be a finite number of seconds, not {value!s}")
        return value

    @field_validator("*")
    @classmethod
    def _a_duration_is_finite(cls, value: object, info: ValidationInfo) -> object:
        # inf, or 1e15, passed "greater than 0" and then overflowed the first timedelta or
        # Event.wait it reached, after start-up; every *_s setting is a duration
        if (info.field_name or "").endswith("_s") and isinstance(value, int | float) and not (
                math.isfinite(value) and value <= MAX_SECONDS):
            raise ValueError(f"must be a number of seconds up to {MAX_SECONDS:,} (a year)")
        return value

    @field_validator("database_url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        # the whole URL is read here, so that a bad one stops the process naming the setting
        # before anything connects (service/database_url.py)
        if url != url.strip():  # "…/a.db " made a file named "a.db ", "…/vm " a database
            raise ValueError("has spaces before or after it: remove them")
        if url.startswith("sqlite:///"):
            folder = Path(sqlite_path(url)).parent
            if not folder.is_dir():  # SQLite would say only "unable to open database file"
                raise ValueError(f"names a file in {folder}, which is not a directory that "
                                 f"exists: create it, or name a file in one that does")
        elif url.startswith(("postgresql://", "postgres://")):
            postgres_target(url)
        else:
            raise ValueError("must start with sqlite:///, postgresql:// or postgres://")
        return url

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, url: str | None) -> str | None:
        # an absolute http(s) URL with a host and nothing a base cannot have: it is named as
        # is in every accepted command's workflow-api header, where the VMAPI client polls
        if url is None:
            return None
        parts = urlsplit(url)
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
                or parts.fragment or parts.username or any(c.isspace() for c in url)):
            raise ValueError("must be an http:// or https:// URL with a host and no query, "
                             "fragment, user or spaces (http://vmapi.example:8080)")
        return url.rstrip("/")

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _format_any_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_token_source(self) -> Settings:
        # Two sources would make revoking a token a matter of remembering both: refuse.
        if self.tokens is not None and self.tokens_file is not None:
            raise ValueError("VMLEDGER_TOKENS and VMLEDGER_TOKENS_FILE are both set: "
                             "configure the tokens in one place only")
        return self

    @model_validator(mode="after")
    def _two_connections_at_least(self) -> Settings:
        # start-up holds its schema lock on one pooled connection while it makes the tables
        # on another: a pool of one could never start (a tester)
        if (self.database_url.startswith(("postgresql:", "postgres:"))
                and self.postgres_pool_size + self.postgres_max_overflow < 2):
            raise ValueError("VMLEDGER_POSTGRES_POOL_SIZE plus VMLEDGER_POSTGRES_MAX_OVERFLOW "
                             "must be at least 2: a process holds its schema lock on one "
                             "connection while it makes its tables on another")
        return self

    @property
    def tokens_configured(self) -> bool:
        """Whether tokens are configured at all (a file or ``VMLEDGER_TOKENS``); without them
        the service runs in open local mode, on loopback only."""
        return self.tokens is not None or self.tokens_file is not None

    @property
    def backend(self) -> Literal["sqlite", "postgres"]:
        """Which event store the database URL selects."""
        return "sqlite" if self.database_url.startswith("sqlite:") else "postgres"

    def postgres_target(self) -> PostgresTarget:
        """The PostgreSQL database the URL names, by the rules every user of it shares
        (``service.database_url.postgres_target``; ``ValueError`` for a SQLite URL)."""
        if self.backend != "postgres":
            raise ValueError("not a PostgreSQL URL")
        return postgres_target(self.database_url)

    def eventsourcing_env(self) -> dict[str, str]:
        """The ``eventsourcing`` library's environment for this database URL."""
        common = {}
        if self.aggregate_cache_size:
            # Safe across processes: a load reads the stream's newer events, and a decision
            # made on a cached fold without that read commits only if the fold was current
            # (service/commands/aggregate_cache.py, which fast-forwards copies, never the
            # cached fold itself: hence the library's own fast-forward is off).
            common = {"AGGREGATE_CACHE_MAXSIZE": str(self.aggregate_cache_size),
                      "AGGREGATE_CACHE_FASTFORWARD": "n"}
        if self.backend == "sqlite":
            path = sqlite_path(self.database_url)
            return {
                **common,
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": path,
                "SQLITE_LOCK_TIMEOUT": "10",
                "APPLICATION_RECORDER_TOPIC": "service.storage:SQLiteLedgerRecorder",
            }
        target = self.postgres_target()
        return {
            **common,
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": target.dbname,
            "POSTGRES_HOST": target.host,
            "POSTGRES_PORT": str(target.port),
            "POSTGRES_USER": target.user,
            "POSTGRES_PASSWORD": target.password,
            "POSTGRES_POOL_SIZE": str(self.postgres_pool_size),
            "POSTGRES_MAX_OVERFLOW": str(self.postgres_max_overflow),
            "POSTGRES_LOCK_TIMEOUT": str(self.postgres_lock_timeout_s),
            "POSTGRES_CONNECT_TIMEOUT": str(self.postgres_connect_timeout_s),
            "APPLICATION_RECORDER_TOPIC": "service.storage:PostgresLedgerRecorder",
        }
