"""``tritonops agent build``: the node-side release agent as one file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tritonops.cli.output import console, run_release_op
from tritonops.cli.params import AsJson, path
from tritonops.core.errors import UsageError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The node-side release agent.")


@app.command("build")
def build_cmd(out: Annotated[Path, typer.Argument(help="Where to write the agent (one file, a zipapp)",
                                                  parser=path)],
              as_json: AsJson = False) -> None:
    """Write the release agent into one file that `python3 FILE COMMAND` runs on a node or in a pod."""
    from tritonops import agent_bundle as bundle

    def build() -> dict:
        if out.is_dir() or (out.exists() and not out.is_file()):
            raise UsageError(f"{out}: exists and is not a regular file")
        try:
            written = bundle.build(out)
        except OSError as e:
            raise UsageError(f"{out}: cannot write ({e.strerror or e})") from None
        return {"path": str(written), "bytes": written.stat().st_size}

    def render(out: dict) -> None:
        console.print(f"wrote {escape(out['path'])} ({out['bytes']} bytes): python3 {escape(out['path'])} --help",
                      highlight=False, soft_wrap=True)

    run_release_op(build, as_json, render)
