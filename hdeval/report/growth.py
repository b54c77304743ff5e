"""The criteria tree as it grew: each node's definition and CV gain, why it was or was not
decomposed further, and each layer's proxy figures and where growth stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hdeval.report.record import RunRecord
from hdeval.tree.criteria import CriteriaTree, Criterion


def tree_growth(record: RunRecord) -> dict | None:
    """Layers (proxy CV Pearson, features, modes and what each added, the next layer's pick,
    why growth stopped) and the tree's nodes in reading order; None: no layer report."""
    if not record.layers or record.tree is None:
        return None
    reports, tree = record.layers, record.tree
    layers = []
    for report in reports:
        gains = report.get("mode_gains") or {}
        layers.append(
            {
                "number": report["layer"],
                "added": len(report.get("criteria", [])),
                "features": report["n_features"],
                "modes": "+".join(report.get("modes") or []),
                "cv_pearson": f"{report['cv_pearson']:.3f}",
                "mode_gains": ", ".join(f"{m} {g:+.3f}" for m, g in gains.items()),
                "next": ", ".join(c.id for c in tree.layer(report["layer"]) if tree.children(c.id)),
                "stopped": report.get("stopped") or "",
                "text_gain": _text_gain(report.get("importances") or {}),
            }
        )
    nodes = [
        {
            "id": node.id,
            "name": node.name,
            "definition": node.definition,
            "layer": node.layer,
            "depth": node.layer - 1,
            "gain": _gain(reports, node),
            "status": status(node, tree, reports),
            "leaf": not tree.children(node.id),
        }
        for node in _reading_order(tree)
    ]
    return {"layers": layers, "nodes": nodes, "stopped": _stopped(reports)}


def status(node: Criterion, tree: CriteriaTree, reports: Sequence[Mapping]) -> str:
    """Why ``node`` was decomposed, or why it was not (pruned, failed, stopped, last layer)."""
    children = tree.children(node.id)
    if children:
        return f"decomposed at layer {node.layer + 1} into {len(children)}"
    last = len(reports)
    if node.layer >= last:
        return f"leaf: the last layer (hierarchy.layers = {last})"
    own = reports[node.layer - 1]
    following = reports[node.layer]
    if node.id in (following.get("not_decomposed") or []):
        return "the decomposer gave no usable sub-criteria: kept as a leaf"
    if own.get("stopped") or not own.get("modes_next"):
        return f"not decomposed: the tree stopped growing at layer {_stop_layer(reports)}"
    picked = len(own.get("selected") or [])
    importances = own.get("importances") or {}
    rivals = [importances.get(c, float("-inf")) for c in own.get("criteria") or []]
    above = sum(v > importances.get(node.id, float("-inf")) for v in rivals)
    if node.layer == 1 or above < picked:  # it would have been picked: a person pinned it
        return "not decomposed: pinned (hierarchy.overrides)"
    return (
        f"pruned: its CV gain is not among the {picked} highest of layer {node.layer} "
        "(hierarchy.top_k), so it stays a leaf"
    )


def _reading_order(tree: CriteriaTree) -> list[Criterion]:
    """Depth first: each aspect followed by its descendants."""
    ordered: list[Criterion] = []

    def visit(node: Criterion) -> None:
        ordered.append(node)
        for child in tree.children(node.id):
            visit(child)

    for root in tree.layer(1):
        visit(root)
    return ordered


def _gain(reports: Sequence[Mapping], node: Criterion) -> str:
    """The node's CV gain (permutation importance) at the layer that added it."""
    if node.layer > len(reports):
        return ""
    value = (reports[node.layer - 1].get("importances") or {}).get(node.id)
    return "" if value is None else f"{value:+.3f}"


def _text_gain(importances: Mapping[str, float]) -> str:
    """The CV gain of the text's own signals (columns not tied to a criterion, ``_text``...)."""
    own = [v for k, v in importances.items() if k.startswith("_")]
    return f"{sum(own):+.3f}" if own else ""


def _stop_layer(reports: Sequence[Mapping]) -> int:
    for report in reports:
        if report.get("stopped") or not report.get("modes_next"):
            return int(report["layer"])
    return len(reports)


def _stopped(reports: Sequence[Mapping]) -> str:
    """Where and why the tree stopped growing, in one sentence."""
    for report in reports:
        if report.get("stopped") and report["stopped"] != "the tree stopped growing earlier":
            return f"Growth stopped at layer {report['layer']}: {report['stopped']}."
    return f"The tree grew through every layer (hierarchy.layers = {len(reports)})."
