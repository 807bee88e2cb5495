"""Drift results as data, and their four renderings: rich table, JSON, Markdown, Prometheus textfile."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from rich.table import Table

from tritonops.core.exitcodes import ExitCode
from tritonops.core.fsio import write_atomic
from tritonops.drift import TEXTFILE_NAME
from tritonops.release_format import node_drift

# The agent (standard library only) writes the node's metric; the alert rules use the observability name.


class Finding(BaseModel):
    """One resource that differs from what the code says."""

    source: str
    host: str  # an inventory host, or <stack>/<env> for Pulumi
    resource: str
    detail: str = ""
    diff: str = ""


class SourceResult(BaseModel):
    """What one source found; ``error`` set when the check itself failed (its findings are then partial)."""

    source: str
    hosts: list[str] = Field(default_factory=list)  # every host/stack the source checked (clean ones too)
    findings: list[Finding] = Field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


class DriftReport(BaseModel):
    results: list[SourceResult] = Field(default_factory=list)
    seconds: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def errors(self) -> dict[str, str]:
        return {r.source: r.error for r in self.results if r.error}

    @property
    def exit_code(self) -> ExitCode:
        """FAILED when any source could not be checked (the result is incomplete), else FINDINGS on drift."""
        if self.errors:
            return ExitCode.FAILED
        return ExitCode.FINDINGS if self.findings else ExitCode.OK

    def counts(self) -> list[dict[str, object]]:
        """Drifted resources per (source, host), including the clean hosts (0) of sources that ran."""
        rows: dict[tuple[str, str], int] = {}
        for r in self.results:
            # A failed source proves nothing clean: its hosts count only where it found drift.
            for h in r.hosts if r.error is None else ():
                rows.setdefault((r.source, h), 0)
            for f in r.findings:
                rows[(r.source, f.host)] = rows.get((r.source, f.host), 0) + 1
        return [{"source": s, "host": h, "count": c} for (s, h), c in sorted(rows.items())]

    def to_json(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "counts": self.counts(),
            "errors": self.errors,
            "results": [r.model_dump() for r in self.results],
        }


def table(report: DriftReport) -> Table:
    t = Table(title=f"drift ({report.seconds:.1f}s): {len(report.findings)} drifted resources, "
                    f"{len(report.errors)} failed sources")
    for col in ("source", "host", "resource", "detail"):
        t.add_column(col, overflow="fold")
    for f in report.findings:
        detail = f.detail + (f"\n{f.diff.rstrip()}" if f.diff else "")
        t.add_row(f.source, f.host, f.resource, detail)
    for source, err in report.errors.items():
        t.add_row(source, "-", "[red]check failed[/]", err)
    for r in report.results:
        if not r.findings and not r.error:
            t.add_row(r.source, ", ".join(r.hosts) or "-", "[green]no drift[/]", f"{r.seconds:.1f}s")
    return t


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: DriftReport, max_diff_lines: int = 20) -> str:
    """A summary for a ticket or a chat message."""
    code = report.exit_code
    head = {ExitCode.OK: "no drift", ExitCode.FINDINGS: f"{len(report.findings)} drifted resources",
            ExitCode.FAILED: "check failed"}[code]
    lines = [f"## Drift check: {head}", ""]
    lines.append("| source | host | drifted | status |")
    lines.append("|---|---|---:|---|")
    for row in report.counts():
        lines.append(f"| {row['source']} | {_md(str(row['host']))} | {row['count']} | "
                     f"{'clean' if row['count'] == 0 else 'drift'} |")
    for source, err in report.errors.items():
        lines.append(f"| {source} | - | - | failed: {_md(err)} |")
    if report.findings:
        lines += ["", "### Details", ""]
        for f in report.findings:
            lines.append(f"- **{f.source}** `{f.host}` `{f.resource}`: {_md(f.detail)}")
            if f.diff:
                diff = f.diff.rstrip().splitlines()
                cut = diff[:max_diff_lines] + ([f"... {len(diff) - max_diff_lines} more lines"]
                                               if len(diff) > max_diff_lines else [])
                lines += ["  ```diff", *[f"  {d}" for d in cut], "  ```"]
    return "\n".join(lines) + "\n"


def textfile(report: DriftReport) -> str:
    ok = {r.source: r.error is None for r in report.results}
    return node_drift.textfile(report.counts(), ok)


def write_textfile(report: DriftReport, directory: Path, name: str = TEXTFILE_NAME) -> Path:
    """Atomically replace ``directory/name`` (node-exporter's textfile collector reads *.prom)."""
    return write_atomic(Path(directory) / name, textfile(report))
