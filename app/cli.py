"""The ``tinygpt`` command with the dashboard's subcommands: ``serve``, ``app`` and ``worker``.

The library's own commands (train, sample, ...) come from :mod:`tinygpt.cli`; this
module only adds the ones that need the app and the worker.

Stopping: from the first moment of ``serve``, ``app`` and ``worker`` (before the app's modules are even
imported), SIGTERM and Ctrl-C ask for an orderly stop (:data:`STOP`). uvicorn and the worker loop
take the signals over while they run and hand them back; each command then exits 0 after its
own shutdown: the app closes its streams, the worker has its jobs checkpoint and re-queue their runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tinygpt import __version__
from tinygpt.stop_signals import set_on_signals

if TYPE_CHECKING:
    from tinygpt.cli import ExtraCommand

SERVICE_COMMANDS = ("serve", "app", "worker", "slurm-executor")
STOP = threading.Event()  # set by SIGTERM / SIGINT once a service command starts


def stop_on_signals() -> None:
    set_on_signals(STOP)


def add_bind_arguments(p: argparse.ArgumentParser) -> None:
    from .settings import get_settings

    settings = get_settings()
    p.add_argument("--host", default=settings.host, help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=settings.port, help="port (default %(default)s)")


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", help="comma-separated device slots, e.g. cpu,cuda:0 (default: the best device)")
    p.add_argument("--name", help="worker name (default HOST:PID); refused while another live worker holds it")
    p.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # set by `serve`: stop when that process dies


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_bind_arguments(p)
    add_worker_arguments(p)


def schema_ready(command: str) -> bool:
    """Bring the database's schema up to date before a service starts (the app's start-up and the worker's do
    it again: nothing left then); False, with a one-line message, when it cannot (``TINYGPT_AUTO_MIGRATE`` false
    and an older schema, a database of a newer version, an upgrade refused)."""
    from .db import init_db
    from .schema import SchemaError

    try:
        init_db()
    except SchemaError as exc:
        print(f"tinygpt {command}: error: {exc}", file=sys.stderr)
        return False
    return True


def run_app(args: argparse.Namespace) -> int:
    import uvicorn

    from .main import create_app
    from .security import BindError, WeakToken, check_bind, check_token_strength
    from .settings import get_settings

    settings = get_settings()
    try:
        check_bind(settings, args.host)
        check_token_strength(settings)
    except (BindError, WeakToken) as exc:
        print(f"tinygpt: error: {exc}", file=sys.stderr)
        return 2
    if not schema_ready(args.command):
        return 2
    app = create_app(host=args.host)
    if STOP.is_set():  # stopped while starting: nothing to shut down
        print("tinygpt app: stopped before it started serving", file=sys.stderr)
        return 0
    # forwarded headers only from the proxies the operator names (uvicorn would trust 127.0.0.1 by default:
    # any local client could then claim any address, and so any client's share of the stream cap)
    proxies = settings.forwarded_allow_ips.strip()
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=settings.access_log,
                root_path=settings.root_path,
                proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)
    return 0


def run_worker_command(args: argparse.Namespace) -> int:
    from tinygpt.device_names import check_device_name
    from worker.main import run_worker
    from worker.registry import WorkerNameInUse

    devices = [check_device_name(d) for d in args.devices.split(",")] if args.devices else None
    if not schema_ready("worker"):
        return 2
    try:
        run_worker(devices, args.name, stop=STOP, parent=getattr(args, "parent", None))
    except WorkerNameInUse as exc:
        print(f"tinygpt worker: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_slurm_executor_command(args: argparse.Namespace) -> int:
    from worker.slurm.executor import run_slurm_executor

    from .settings import get_settings

    if not get_settings().slurm:
        print("tinygpt slurm-executor: error: the slurm pool is off: set TINYGPT_SLURM=true and its settings "
              "(README, On a Slurm cluster)", file=sys.stderr)
        return 2
    if not schema_ready("slurm-executor"):
        return 2
    run_slurm_executor(stop=STOP)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """The app, one worker for this machine's devices and, with ``TINYGPT_SLURM``, the Slurm executor, as
    processes of their own; SIGTERM or Ctrl-C stops them all."""
    from .settings import get_settings

    worker_cmd = [sys.executable, "-m", "app.cli", "worker", "--parent", str(os.getpid())]
    if args.devices:
        worker_cmd += ["--devices", args.devices]
    if args.name:
        worker_cmd += ["--name", args.name]
    helpers = [worker_cmd] + [[sys.executable, "-m", "app.cli", "slurm-executor"]] * get_settings().slurm
    processes = [subprocess.Popen(cmd, env=os.environ.copy(), start_new_session=True) for cmd in helpers]
    try:
        return run_app(args)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)  # the worker's jobs checkpoint and go back to the queue
        for process in processes:
            process.wait()


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the sweep: a W&B-style YAML (or JSON) file")
    p.add_argument("--url", help="a dashboard to submit it to, e.g. http://gpu-box:8000 (default: this "
                   "machine's dashboard home, $TINYGPT_HOME)")


def run_sweep_command(args: argparse.Namespace) -> int:
    """Submit a sweep; print its page's address. Its trials run on the dashboard's workers."""
    from .errors import AppError
    from .settings import get_settings
    from .sweep_submit import submit_local, submit_remote

    settings = get_settings()
    try:
        text = open(args.config, encoding="utf-8").read()  # noqa: SIM115
        sweep = submit_remote(text, args.url, settings) if args.url else submit_local(text, settings)
    except OSError as exc:
        print(f"tinygpt sweep: error: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return 2
    except AppError as exc:
        where = f"{exc.field}: " if exc.field else ""
        print(f"tinygpt sweep: error: {where}{exc.message}", file=sys.stderr)
        return 2
    base = args.url.rstrip("/") if args.url else settings.site_url
    print(f"sweep {sweep['id']} ({sweep['name']}): {sweep['trials_planned']} trials planned; {base}/sweeps/{sweep['id']}")
    return 0


def add_db_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    sub.add_parser("status", help="the database's schema revision and this version's")
    sub.add_parser("upgrade", help="back the database up (SQLite), then bring its schema to this version's")
    sub.add_parser("backup", help="a consistent copy of the SQLite database into $TINYGPT_HOME/backups/")
    r = sub.add_parser("restore", help="replace the SQLite database with a backup (the dashboard stopped); "
                       "the current one is backed up first")
    r.add_argument("file", type=Path, help="a backup, e.g. $TINYGPT_HOME/backups/tinygpt-20261205T101500.000Z-0010.db")


def run_db_command(args: argparse.Namespace) -> int:
    """``tinygpt db``: the schema's revision, upgrades, backups and restores by hand (app/schema.py)."""
    from . import schema
    from .db import get_engine, upgrade_schema
    from .settings import get_settings

    settings = get_settings()
    try:
        if args.db_command == "status":
            if settings.db_url.startswith("sqlite") and not schema.sqlite_path(settings).is_file():
                print(f"no database yet at {schema.sqlite_path(settings)}: the dashboard makes it when it starts")
                return 0
            state = schema.database_state(get_engine(settings))
            print(f"database {settings.db_url}: revision {state.current or 'none (empty)'}; this version "
                  f"({__version__}) needs {state.head}" + ("" if state.up_to_date else ": run `tinygpt db upgrade`"))
        elif args.db_command == "upgrade":
            done = upgrade_schema(settings, explicit=True)
            found = done.found
            print(f"database at revision {found.head}" + (" (it was already)" if found.up_to_date else
                  f" (was {found.current or 'empty'})") + (f"; a backup of it before: {done.backup}" if done.backup else ""))
        elif args.db_command == "backup":
            print(f"wrote {schema.backup_database(settings)}")
        else:
            previous = schema.restore_database(settings, args.file)
            kept = f"; the database it replaced: {previous}" if previous else ""
            print(f"restored {args.file} into {schema.sqlite_path(settings)}{kept}")
    except schema.SchemaError as exc:
        print(f"tinygpt db {args.db_command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_token_command(args: argparse.Namespace) -> int:
    """``tinygpt token``: a fresh random API token (32 bytes, URL-safe), for ``TINYGPT_API_TOKEN``."""
    import secrets

    print(secrets.token_urlsafe(32))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    if words and words[0] in SERVICE_COMMANDS:
        stop_on_signals()
    from tinygpt.cli import main as tinygpt_main  # after the signal handlers

    from .settings import SettingsError, get_settings

    try:
        return tinygpt_main(argv, extra=extra_commands(), paths=get_settings().library_paths())
    except SettingsError as exc:
        print(f"tinygpt: error: {exc}", file=sys.stderr)
        return 2


def extra_commands() -> list[ExtraCommand]:
    """The dashboard's subcommands, added to the library's ``tinygpt`` command."""
    from tinygpt.cli import ExtraCommand

    return [
        ExtraCommand("serve", "start the dashboard app and a worker together", add_serve_arguments, run_serve),
        ExtraCommand("app", "start the dashboard app (REST API, event streams, pages)", add_bind_arguments, run_app),
        ExtraCommand("worker", "start a worker that runs queued jobs", add_worker_arguments, run_worker_command),
        ExtraCommand("slurm-executor", "submit the slurm pool's runs to Slurm and follow their jobs",
                     lambda p: None, run_slurm_executor_command),
        ExtraCommand("db", "the database: its schema revision, upgrade, backup and restore (README: Upgrading)",
                     add_db_arguments, run_db_command),
        ExtraCommand("sweep", "submit a hyperparameter sweep (W&B-style YAML) to the dashboard",
                     add_sweep_arguments, run_sweep_command),
        ExtraCommand("token", "print a fresh random API token for TINYGPT_API_TOKEN (README: Security)",
                     lambda p: None, run_token_command),
    ]


if __name__ == "__main__":
    sys.exit(main())
