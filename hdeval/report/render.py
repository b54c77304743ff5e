"""``report.html``: one self-contained page per run (charts inlined, nothing fetched), rendered
from the run's outputs with the Jinja2 template ``templates/report.html.j2``. The report stage
and ``hdeval report RUN_DIR`` both call :func:`write_report`."""

from __future__ import annotations

from pathlib import Path

from hdeval.report.charts import png_uri, scatter_chart
from hdeval.report.dhp_view import dhp_section
from hdeval.report.growth import tree_growth
from hdeval.report.page import RUN_GATES, cost, readings, scorers, selection, verdict
from hdeval.report.record import SHAP_CHARTS, RunRecord, read_run
from hdeval.report.systems_view import interval_rows, system_rows
from hdeval.report.worst_texts import human_scores, largest_errors

#: The page's file name, next to results.md.
REPORT = Path("report.html")


def report_context(record: RunRecord) -> dict:
    """Everything the template shows, section by section; None marks a section not run."""
    metrics = record.metrics
    scatter = None
    if record.predictions is not None and record.held_out is not None:
        aspects = [a for a in record.aspects if a in record.predictions.columns]
        human = human_scores(record.held_out, aspects)
        scatter = scatter_chart(record.predictions[aspects], human)
    words = readings(record)
    shap = [
        {
            "aspect": aspect,
            "bar": png_uri(charts["bar"]),
            "beeswarm": png_uri(charts["beeswarm"]),
            "readings": words.get(aspect, []),
        }
        for aspect, charts in record.shap_charts.items()
    ]
    return {
        "aspects": record.aspects,
        "rows": metrics.get("rows", {}),
        "selection_kind": f"{metrics['selection']['kind']} on {metrics['selection']['features']}",
        "verdict": verdict(metrics),
        "scatter": scatter,
        "scorers": scorers(record),
        "growth": tree_growth(record),
        "shap": shap,
        "dhp": dhp_section(record),
        "selection": selection(metrics),
        "worst": largest_errors(record),
        "explained": bool(record.explanations),
        "cost": cost(record),
        "intervals": interval_rows(metrics.get("intervals")),
        "systems": system_rows(metrics.get("systems")),
        "left_out": metrics.get("left_out") or {},
        "run_gates": RUN_GATES,
        "shap_dir": str(SHAP_CHARTS),
    }


def render_report(record: RunRecord) -> str:
    """The report page of ``record`` as HTML."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    environment = Environment(
        loader=PackageLoader("hdeval.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return environment.get_template("report.html.j2").render(**report_context(record))


def write_report(root: Path, out: Path | None = None) -> Path:
    """Render the report of the run in ``root`` to ``out`` (default ``root/report.html``),
    replacing it in one step; returns the path written."""
    target = Path(out) if out is not None else Path(root) / REPORT
    html = render_report(read_run(Path(root)))
    partial = target.with_name(target.name + ".tmp")
    partial.write_text(html, encoding="utf-8")
    partial.replace(target)
    return target
