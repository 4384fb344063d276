"""The one settings object, read once from the environment (``TINYGPT_*``) and shared by app and worker.

Every field is documented in the README's settings table (a test checks it).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AnyUrl,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from tinygpt.paths import DEFAULT_HOME, Paths

from .webhook_policy import ReceiverPolicy, RunWebhooks, parse_allow_entry


def check_webhook_url(url: AnyUrl) -> AnyUrl:
    """Webhooks go to http or https receivers only (not file:, ftp:, gopher: ...)."""
    if url.scheme not in ("http", "https"):
        raise ValueError(f"webhook URLs must be http or https, got {str(url)!r}")
    return url


WebhookUrl = Annotated[AnyUrl, AfterValidator(check_webhook_url)]

#: A Slurm time limit as ``sbatch --time`` takes it: minutes, or [days-]hours:minutes:seconds.
SLURM_TIME = re.compile(r"\d{1,6}|(\d{1,3}-)?\d{1,2}:\d{2}:\d{2}")


def check_time_limit(value: str | None) -> str | None:
    """A Slurm time limit (``sbatch --time``): minutes or [D-]HH:MM:SS.

    >>> check_time_limit("00:10:00"), check_time_limit("90"), check_time_limit("1-12:00:00")
    ('00:10:00', '90', '1-12:00:00')
    """
    if value is not None and not SLURM_TIME.fullmatch(value):
        raise ValueError(f"time_limit must be minutes or [days-]HH:MM:SS as sbatch --time takes it, got {value!r}")
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TINYGPT_", extra="ignore")

    home: Path = Field(default=DEFAULT_HOME, description="data folder: database, runs, datasets, caches")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default sqlite:///$TINYGPT_HOME/tinygpt.db")
    auto_migrate: bool = Field(default=True, description="bring the database's schema up to date when the app, a "
                               "worker or the Slurm executor starts (a SQLite database is backed up first); false: "
                               "they refuse to start on an older schema until `tinygpt db upgrade` (README: "
                               "Upgrading)")
    backups_kept: int = Field(default=5, ge=1, le=1000, description="how many backups of the SQLite database "
                              "`$TINYGPT_HOME/backups/` keeps (one is written before every upgrade and by `tinygpt "
                              "db backup`); older ones are removed")
    shared_dir: Path | None = Field(default=None, description="folder for run folders and uploads that workers on "
                                    "other machines reach (a network file system mounted at the same path on "
                                    "each); default $TINYGPT_HOME")
    holmes_path: Path | None = Field(default=None, description="Holmes corpus file used instead of a download")
    host: str = Field(default="127.0.0.1", description="address the app binds to")
    port: int = Field(default=8000, description="port the app binds to")
    api_token: SecretStr | None = Field(default=None, description="token for every page, API route and event "
                                        "stream but `/healthz` and `/login` (header `Authorization: Bearer TOKEN`, "
                                        "or the login page's cookie); required when `host` is not a loopback address")
    public_read: bool = Field(default=False, description="with a token set, let anyone read (GET) the pages, the "
                              "JSON API and the event streams without it: run names, configs, metrics, samples (text "
                              "generated from your corpus) and dataset names; checkpoints, webhook URLs (shown as "
                              "scheme and host only), the model's answers (see `TINYGPT_PUBLIC_SAMPLING`) and every "
                              "change still need the token")
    public_sampling: bool = Field(default=False, description="with `TINYGPT_PUBLIC_READ`, also let readers without "
                                  "the token ask a run's model: the sample box and nearest tokens (each loads a "
                                  "checkpoint: bounded by `TINYGPT_MODEL_LOADS_PER_MINUTE`)")
    model_loads_per_minute: int = Field(default=20, ge=1, le=10_000, description="checkpoints loaded for sampling "
                                        "and nearest tokens per minute, over the whole app (a cached model costs "
                                        "nothing); more are answered 429")
    auth_failures_allowed: int = Field(default=10, ge=1, le=10_000, description="wrong tokens (bearer, login "
                                       "form, a run's token, a stale login cookie) one client address may present "
                                       "before it is answered 429 with `Retry-After`: 1 s, doubling with each "
                                       "further failure up to 15 minutes; a right token ends the count")
    session_days: float = Field(default=7.0, gt=0, le=3650, description="how long a browser's login lasts; "
                                "`/logout` ends it at once, and a new `TINYGPT_API_TOKEN` ends every one")
    root_path: str = Field(default="", description="path prefix the dashboard is served under behind a reverse "
                           "proxy that strips it, e.g. `/tinygpt` (README, Behind a reverse proxy)")
    forwarded_allow_ips: str = Field(default="", description="addresses of the reverse proxies whose "
                                     "`X-Forwarded-For`/`-Proto` headers are trusted (comma-separated, `*` for "
                                     "any); default none: a client's address is the connection's own")
    access_log: bool = Field(default=False, description="log a line for every request the app answers (errors "
                             "are logged either way); off by default: a watched run's page asks many times a "
                             "minute, and each line costs about a tenth of the app's CPU under load")
    allowed_hosts: list[str] = Field(default_factory=list, description="more host names the app answers to while "
                                     "bound to a loopback address (it answers only to 127.0.0.1 and localhost "
                                     "otherwise, against DNS rebinding); a JSON list")
    max_upload_mb: float = Field(default=50.0, description="largest dataset upload, in MB")
    max_checkpoint_mb: float = Field(default=500.0, description="largest checkpoint a reported or imported run "
                                     "may upload, in MB")
    max_artifacts_mb: float = Field(default=2000.0, description="largest total of one MLflow run's artifacts, "
                                    "in MB (each file at most max_checkpoint_mb)")
    max_request_kb: int = Field(default=1024, description="largest body of any other request, in KB")
    max_streams_per_client: int = Field(default=50, ge=1, description="event streams one client address may hold "
                                        "open at once")
    max_streams: int = Field(default=500, ge=1, description="event streams open at once on the whole app, from "
                             "all clients together")
    max_steps: int = Field(default=1_000_000, description="largest `steps` a run may ask for")
    sample_max_tokens: int = Field(default=2000, description="largest `max_tokens` of a sample request")
    job_memory_mb: int | None = Field(default=None, ge=64, description="address-space cap of each job process, "
                                      "in MB (a run that needs more fails `out of memory` instead of taking the "
                                      "machine down); unset: no cap")
    heartbeat_sec: float = Field(default=2.0, description="how often a running job writes its heartbeat")
    stale_after_sec: float = Field(default=10.0, description="a running run whose heartbeat is older is crashed")
    client_silent_sec: float = Field(default=900.0, gt=0, description="a run reporting through MLflow's client "
                                     "that sends nothing for this long ends crashed (its script was killed); a "
                                     "value it logs later brings it back to running")
    max_attempts: int = Field(default=3, description="a run that crashed this many times is not re-queued again")
    worker_poll_sec: float = Field(default=0.5, description="how often an idle worker looks for queued runs")
    warm_jobs: bool = Field(default=True, description="keep one job process per device slot started ahead, its "
                            "modules imported and torch's first-use costs paid, so a run's job has built its data "
                            "and model within about 0.4 s of its submission instead of 5.5 s (each run still gets a "
                            "fresh process; it prepares at the lowest CPU priority, so the run training beside it "
                            "keeps the cores)")
    webhook_urls: list[WebhookUrl] = Field(default_factory=list, description="webhooks (http or https) that receive "
                                       "every alert of every run and sweep as a JSON POST with a `text` line for "
                                       "Slack, Discord and Mattermost; a JSON list. Public receivers only, unless "
                                       "allowed by `TINYGPT_WEBHOOK_ALLOW`")
    webhook_allow: list[str] = Field(default_factory=list, description="host names and address ranges (CIDR) that "
                                     "webhooks may reach although they are not public, e.g. "
                                     "`[\"10.0.0.0/8\", \"hooks.lan\"]`: a receiver on your own network; a JSON list")
    run_webhooks: RunWebhooks = Field(default="any-public", description="what a run's own webhook URLs "
                                      "(`notify.urls`) may be: `any-public` (a public receiver, or an allowed one), "
                                      "`allow-list` (only those of `TINYGPT_WEBHOOK_ALLOW`) or `off` (none: only "
                                      "`TINYGPT_WEBHOOK_URLS`)")
    report_to: str | None = Field(default=None, description="the dashboard that `tinygpt train --report-to`, "
                                  "`tinygpt sync` and `tinygpt import` talk to when no URL is given")
    public_url: str | None = Field(default=None, description="the dashboard's address as people reach it, for the "
                                   "links in alerts; default http://HOST:PORT")
    default_pool: Literal["local", "slurm"] = Field(default="local", description="where a run goes when its "
                                                    "submission does not say (`pool`): `local` (this dashboard's "
                                                    "workers) or `slurm` (jobs on a Slurm cluster: `TINYGPT_SLURM`)")
    slurm: bool = Field(default=False, description="offer the `slurm` pool: runs submitted with `sbatch` by "
                        "`tinygpt slurm-executor` (started by `tinygpt serve` too), trained on the cluster's nodes "
                        "and reported back (README, On a Slurm cluster)")
    slurm_partition: str | None = Field(default=None, description="`#SBATCH --partition`; unset: the cluster's "
                                        "default")
    slurm_account: str | None = Field(default=None, description="`#SBATCH --account`")
    slurm_qos: str | None = Field(default=None, description="`#SBATCH --qos`")
    slurm_time_limit: str = Field(default="01:00:00", description="`#SBATCH --time` of a run that gives no "
                                  "`time_limit`: minutes or [D-]HH:MM:SS")
    slurm_gres: str | None = Field(default=None, description="the generic resource a run's GPUs are asked as, e.g. "
                                   "`gpu` or `gpu:a100` (a run with `gpus: N` gets `--gres=gpu:N` and one torchrun "
                                   "over them); unset: CPU jobs, one task with `gpus` CPU processes")
    slurm_cpus_per_task: int = Field(default=1, ge=1, le=1024, description="`#SBATCH --cpus-per-task` (per "
                                     "training process)")
    slurm_sbatch_lines: list[str] = Field(default_factory=list, description="more `#SBATCH` lines, each without "
                                          "the prefix, e.g. `[\"--mem=16G\", \"--constraint=h100\"]`; a JSON list")
    slurm_setup: list[str] = Field(default_factory=list, description="shell lines the job runs first on the node, "
                                   "e.g. `[\"module load cuda/12.4\", \"source ~/venvs/tinygpt/bin/activate\"]`; "
                                   "a JSON list")
    slurm_python: str | None = Field(default=None, description="the Python on the nodes that has tinygpt "
                                     "installed, or a container's, e.g. `apptainer exec --nv tinygpt.sif python`; "
                                     "default: this dashboard's own interpreter (a shared file system)")
    slurm_dashboard_url: str | None = Field(default=None, description="the dashboard's address as the compute "
                                            "nodes reach it; default `TINYGPT_PUBLIC_URL`, else http://HOST:PORT")
    slurm_poll_sec: float = Field(default=3.0, gt=0, le=600, description="how often the Slurm executor asks "
                                  "`squeue` about its jobs and looks for queued runs")
    stall_after_sec: float = Field(default=60.0, gt=0, description="a running run with no step for this long, or "
                                   "10 times its median step time if longer, is marked stalled")
    event_poll_sec: float = Field(default=0.1, description="how often event streams look for new events")
    keepalive_sec: float = Field(default=15.0, description="comment keep-alive interval on event streams")
    event_window_sec: float = Field(default=60.0, ge=1, le=86_400, description="how long a run's metric events stay "
                                    "in the event outbox for pages that reconnect; older rows are read from its "
                                    "metrics history")

    @field_validator("webhook_allow")
    @classmethod
    def _allow_entries(cls, v: list[str]) -> list[str]:
        for entry in v:
            parse_allow_entry(entry)
        return v

    @model_validator(mode="after")
    def _webhooks_allowed(self) -> Settings:
        policy = self.receiver_policy
        for url in self.webhook_urls:
            problem = policy.submission_problem(str(url), per_run=False)
            if problem:
                raise ValueError(f"TINYGPT_WEBHOOK_URLS: {url}: {problem}")
        return self

    @property
    def receiver_policy(self) -> ReceiverPolicy:
        """Where webhooks may go (``app/webhook_policy.py``)."""
        return ReceiverPolicy.of(self.webhook_allow, self.run_webhooks)

    @field_validator("root_path")
    @classmethod
    def _root_path(cls, v: str) -> str:
        v = v.strip().rstrip("/")
        if v and (not v.startswith("/") or "//" in v or any(c in v for c in "?#\\ ")):
            raise ValueError(f"TINYGPT_ROOT_PATH must be a path such as /tinygpt, got {v!r}")
        return v

    @field_validator("slurm_time_limit")
    @classmethod
    def _slurm_time(cls, v: str) -> str:
        return check_time_limit(v) or v

    @model_validator(mode="after")
    def _slurm_pool_on(self) -> Settings:
        if self.default_pool == "slurm" and not self.slurm:
            raise ValueError("TINYGPT_DEFAULT_POOL=slurm needs TINYGPT_SLURM=true")
        return self

    @property
    def pools(self) -> list[str]:
        """The pools runs may go to: ``local`` always, ``slurm`` when it is set up."""
        return ["local", "slurm"] if self.slurm else ["local"]

    @property
    def slurm_report_url(self) -> str:
        """Where a Slurm job's trainer reports (``--report-to``)."""
        return (self.slurm_dashboard_url or self.site_url).rstrip("/")

    @property
    def site_url(self) -> str:
        """The dashboard's address for links that leave it (alerts)."""
        return (self.public_url or f"http://{self.host}:{self.port}{self.root_path}").rstrip("/")

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home_dir / 'tinygpt.db'}"

    @property
    def shared_path(self) -> Path:
        return self.shared_dir.expanduser() if self.shared_dir else self.home_dir

    @property
    def runs_dir(self) -> Path:
        return self.shared_path / "runs"

    @property
    def datasets_dir(self) -> Path:
        return self.shared_path / "datasets"

    @property
    def cache_dir(self) -> Path:
        return self.home_dir / "cache"

    def holmes_corpus(self) -> Path:
        return self.holmes_path.expanduser() if self.holmes_path else self.datasets_dir / "holmes.txt"

    def library_paths(self) -> Paths:
        """What the library's commands (train, sample, sync, ...) read, from these settings."""
        token = self.api_token.get_secret_value() if self.api_token is not None else None
        return Paths(home=self.home_dir, holmes_override=self.holmes_corpus(), report_to=self.report_to,
                     api_token=token)


class SettingsError(ValueError):
    """A ``TINYGPT_*`` variable with a value the settings refuse: one line naming it."""


@lru_cache
def get_settings() -> Settings:
    try:
        return Settings()
    except PydanticSettingsError as exc:  # a list or object setting that is not JSON
        field = re.search(r'field "(\w+)"', str(exc))
        name = f"TINYGPT_{field.group(1).upper()}" if field else "a TINYGPT_ setting"
        raise SettingsError(f"{name}: not valid JSON (a list is written [\"a\", \"b\"])") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["loc"]:  # a field's own check; a check across fields names its setting in the message
            message = f"TINYGPT_{str(first['loc'][0]).upper()}: {message}"
        raise SettingsError(message) from None
