"""``irforge server start | status | stop``: one local Prefect server that every later
``irforge run`` uses (flows/local_server.py); registered on :data:`flows.cli.app`."""

from __future__ import annotations

from typing import Annotated

import typer

from flows import local_server
from flows.cli import _one_line_errors, app, out

server_app = typer.Typer(
    no_args_is_help=True,
    help="One local Prefect server for many commands (a run then skips starting a temporary one).",
)
app.add_typer(server_app, name="server")


@server_app.command("start")
@_one_line_errors
def start(
    port: Annotated[int | None, typer.Option("--port", help="Port (default 4200, else a free one).")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for it to answer.")] = 180.0,
) -> None:
    """Start a Prefect server in the background (or show the one running)."""
    server = local_server.start(port, timeout_s)
    out.print(f"Prefect server running at {server.url} (pid {server.pid}, log {server.log})", highlight=False)
    out.print(f"UI: {server.url.removesuffix('/api')}; `irforge server stop` stops it", highlight=False)


@server_app.command("status")
@_one_line_errors
def status() -> None:
    """Whether the local server runs, and where."""
    server = local_server.running()
    if server is None:
        out.print("no local Prefect server: each run starts a temporary one", highlight=False)
        raise typer.Exit(1)
    out.print(f"Prefect server running at {server.url} (pid {server.pid})", highlight=False)


@server_app.command("stop")
@_one_line_errors
def stop() -> None:
    """Stop the local server `irforge server start` started."""
    server = local_server.stop()
    out.print("stopped" if server else "no local Prefect server was running", highlight=False)
