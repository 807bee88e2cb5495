"""``tritonops validate`` and ``tritonops manifest``: a model repository's layout, configs and file hashes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tritonops.cli.output import console, err_console, print_json
from tritonops.cli.params import JsonReport
from tritonops.cli.params import path as path_arg
from tritonops.core.errors import ReleaseError
from tritonops.core.exitcodes import ExitCode
from tritonops.core.fsio import read_bounded, write_atomic
from tritonops.core.names import MANIFEST_FILE, MANIFEST_MAX
from tritonops.model_repo.target import Target


def validate(
    path: Annotated[Path, typer.Argument(help="A model repository, or one model folder", parser=path_arg)],
    target: Annotated[Target | None, typer.Option(help="Hardware the repository is for")] = None,
    config_name: Annotated[
        str | None, typer.Option(help="Use configs/NAME.pbtxt as the active config (tritonserver --model-config-name)")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(min=0, help="GPUs the target has: instance groups may use ids 0..N-1 "
                                 "(default: what --target implies: cpu 0, jetson 1, gpu unchecked)")
    ] = None,
    backend: Annotated[
        list[str] | None, typer.Option(metavar="NAME", help="A custom backend the target's Triton has besides the "
                                       "ones it ships (repeat the option for more)")
    ] = None,
    backend_directory: Annotated[
        Path | None, typer.Option(metavar="DIR", parser=path_arg, help="Triton's backend folder "
                                  "(tritonserver --backend-directory): each folder in it is a backend")
    ] = None,
    as_json: JsonReport = False,
) -> None:
    """Check a model repository's layout and every config.pbtxt. Exit 0 clean, 1 errors, 2 usage error."""
    from tritonops.model_repo.validate import UsageError
    from tritonops.model_repo.validate import validate as validate_repo

    try:
        report = validate_repo(path, target=target, config_name=config_name, gpus=gpus, backends=backend or (),
                               backend_dir=backend_directory)
    except UsageError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        for f in [*report.errors, *report.warnings]:
            colour = "red" if f.severity == "error" else "yellow"
            fld = f" [{f.field}]" if f.field else ""
            console.print(f"[{colour}]{f.severity}[/] {f.location()}:{escape(fld)} {escape(f.message)}",
                          highlight=False, soft_wrap=True)
            for r in f.related:  # the other places the finding is about, one line each
                console.print(f"  see {r.location()}:{escape(f' [{r.field}]' if r.field else '')}",
                              highlight=False, soft_wrap=True)
        console.print(f"{len(report.models)} models, {len(report.errors)} errors, {len(report.warnings)} warnings")
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


def manifest(
    path: Annotated[Path, typer.Argument(help="A model repository (or release) folder", parser=path_arg)],
    compare_to: Annotated[
        Path | None, typer.Option("--compare", help="A manifest JSON to compare the folder against", parser=path_arg)
    ] = None,
    write: Annotated[bool, typer.Option(help=f"Also write {MANIFEST_FILE} into the folder")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --compare: the differences as JSON (the manifest "
                                          "itself is always printed as JSON, its file format)")] = False,
) -> None:
    """Print the sha256 manifest of a folder as stable JSON, or compare it with a saved one (exit 1 on a difference)."""
    from tritonops.release_format import manifest as manifests

    def usage(message: str) -> typer.Exit:
        err_console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        return typer.Exit(ExitCode.USAGE)

    if not path.is_dir():
        raise usage(f"{path}: not a directory")
    out = path / MANIFEST_FILE
    if write and (out.is_symlink() or (out.exists() and not out.is_file())):
        raise usage(f"{out}: not a regular file; the manifest is never written through a link or over a folder")
    try:
        saved = None if compare_to is None else manifests.parse(read_bounded(compare_to, MANIFEST_MAX),
                                                                str(compare_to))
        current = manifests.tree_files(path)
    except ReleaseError as e:
        raise usage(str(e)) from None
    except OSError as e:
        raise usage(f"{e.filename or path}: cannot read ({e.strerror or e})") from None
    if saved is not None:
        diff = manifests.compare(saved, current)
        if as_json:
            print_json(diff)
        else:
            for kind in ("added", "removed", "changed"):
                for rel in diff[kind]:
                    console.print(f"{kind:<8} {escape(str(path / rel))}", highlight=False, soft_wrap=True)
            console.print(", ".join(f"{len(diff[k])} {k}" for k in ("added", "removed", "changed"))
                          + f" against {escape(str(compare_to))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.FINDINGS if any(diff.values()) else ExitCode.OK)
    if write:
        write_atomic(out, manifests.text(current))
    typer.echo(manifests.text(current), nl=False)


def warmup(
    path: Annotated[Path, typer.Argument(help="A model repository", parser=path_arg)],
    as_json: JsonReport = False,
) -> None:
    """Generate Triton model_warmup from each model's golden.json where the model declares none.

    The inputs' bytes go into <model>/warmup/, the entries into config.pbtxt (only model_warmup changes);
    run it before publishing, or publish with release publish --warmup. Exit 1 on a golden.json it cannot use."""
    from tritonops.model_repo import warmup as warmups
    from tritonops.model_repo.pbtxt import ModelConfigError

    if not path.is_dir():
        err_console.print(f"[red]error:[/] {escape(str(path))}: not a model repository folder", highlight=False)
        raise typer.Exit(ExitCode.USAGE)
    try:
        results = warmups.generate(path)
    except ModelConfigError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.FINDINGS) from None
    if as_json:
        print_json([vars(r) for r in results])
        return
    for r in results:
        detail = f"{len(r.files)} file(s) in {r.model}/{warmups.WARMUP_DIR}" if r.files else r.reason
        console.print(f"{r.action:<9} {escape(r.model)}: {escape(detail)}", highlight=False, soft_wrap=True)
