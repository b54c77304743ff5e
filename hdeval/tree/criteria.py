"""The criteria tree: human aspects (layer 1) and their LLM-made decompositions (layers 2+).

Stored as a readable YAML file that a person may edit. Each node keeps its parent's id; the file
lists nodes in layer order so that a reader sees the hierarchy top-down.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from hdeval.errors import ConfigError
from hdeval.invalid_unicode import unicode_problems
from hdeval.params import CriterionOverride, DataParams


@dataclass(frozen=True)
class Criterion:
    """One node of the tree. ``id`` is unique and stable; ``parent`` is the parent's id."""

    id: str
    name: str
    definition: str
    parent: str | None = None
    layer: int = 1
    decomposed: bool = False


@dataclass
class CriteriaTree:
    """An ordered collection of criteria with parent links."""

    criteria: list[Criterion] = field(default_factory=list)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.criteria:
            if node.id in seen:
                raise ConfigError(f"criteria tree: duplicate id {node.id!r}")
            if node.parent is not None and node.parent not in seen:
                raise ConfigError(
                    f"criteria tree: {node.id!r} names parent {node.parent!r}, "
                    "which is not listed before it"
                )
            seen.add(node.id)

    def __iter__(self) -> Iterator[Criterion]:
        return iter(self.criteria)

    def __len__(self) -> int:
        return len(self.criteria)

    def get(self, criterion_id: str) -> Criterion:
        for node in self.criteria:
            if node.id == criterion_id:
                return node
        raise KeyError(f"no criterion {criterion_id!r} in the tree")

    def parent(self, criterion: Criterion) -> Criterion | None:
        return None if criterion.parent is None else self.get(criterion.parent)

    def children(self, criterion_id: str) -> list[Criterion]:
        return [c for c in self.criteria if c.parent == criterion_id]

    def layer(self, number: int) -> list[Criterion]:
        return [c for c in self.criteria if c.layer == number]

    @property
    def depth(self) -> int:
        return max((c.layer for c in self.criteria), default=0)

    def root(self, criterion: Criterion) -> Criterion:
        """The layer-1 aspect a criterion descends from."""
        while criterion.parent is not None:
            criterion = self.get(criterion.parent)
        return criterion

    def lineage(self, criterion: Criterion) -> list[Criterion]:
        """The criterion's ancestors from its layer-1 aspect down, then the criterion itself."""
        chain = [criterion]
        while chain[0].parent is not None:
            chain.insert(0, self.get(chain[0].parent))
        return chain

    def extend(self, nodes: Iterable[Criterion]) -> CriteriaTree:
        return CriteriaTree([*self.criteria, *nodes])

    def fingerprint(self) -> str:
        """sha256 of ids, names, definitions and links; independent of file formatting."""
        payload = [[c.id, c.name, c.definition, c.parent, c.layer] for c in self.criteria]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()

    # ----------------------------------------------------------------- YAML
    def to_yaml(self, path: Path) -> None:
        rows = [asdict(c) for c in sorted(self.criteria, key=lambda c: c.layer)]
        text = yaml.safe_dump({"criteria": rows}, sort_keys=False, allow_unicode=True, width=100)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)

    @classmethod
    def from_yaml(cls, path: Path) -> CriteriaTree:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read criteria tree {path}: {exc}") from exc
        if problem := unicode_problems(data):
            raise ConfigError(f"criteria tree {path}: {problem}")
        rows = (data or {}).get("criteria")
        if not isinstance(rows, list):
            raise ConfigError(f"{path}: expected a top-level 'criteria' list")
        nodes = []
        for i, row in enumerate(rows):
            missing = {"id", "name", "definition"} - set(row or {})
            if missing:
                raise ConfigError(f"{path}: criterion #{i} lacks {sorted(missing)}")
            nodes.append(Criterion(**row))
        return cls(nodes)


def aspects_tree(config: DataParams) -> CriteriaTree:
    """The layer-1 criteria file, checked to hold a criterion for every aspect.

    Only the aspects in ``config.aspects`` (and anything under them) are kept: a file may
    define more aspects than a run scores (Topical-Chat's six, of which the paper scores four).
    """
    tree = CriteriaTree.from_yaml(config.criteria)
    missing = set(config.aspects) - {c.id for c in tree.layer(1)}
    if missing:
        raise ConfigError(
            f"{config.criteria}: no layer-1 criterion for aspects {sorted(missing)} "
            "(params data.aspects)"
        )
    wanted = set(config.aspects)
    return CriteriaTree([c for c in tree if tree.root(c).id in wanted])


def _parent_id(criterion_id: str) -> str | None:
    """The parent part of a decomposed criterion's id (``<parent id>.<slug>``)."""
    return criterion_id.rsplit(".", 1)[0] if "." in criterion_id else None


def apply_overrides(
    tree: CriteriaTree,
    overrides: Mapping[str, CriterionOverride],
    decomposed: Iterable[str] = (),
    final: bool = False,
) -> CriteriaTree:
    """``tree`` with a person's corrections (``hierarchy.overrides``): names and definitions
    replaced, deleted criteria removed with everything below them.

    An override must name a criterion that exists: one of the aspects, a child of a node in
    ``decomposed`` (the nodes this layer just decomposed), or, with ``final``, any criterion of
    the finished tree. A deleted criterion may be absent (an earlier layer removed it).
    Otherwise :class:`~hdeval.errors.ConfigError` names it. Pins are honoured by the layer step,
    which never decomposes a pinned criterion.
    """
    ids = {c.id for c in tree}
    just_grown = set(decomposed)
    for criterion_id in overrides:
        if criterion_id in ids:
            continue
        parent = _parent_id(criterion_id)
        lineage = [criterion_id]
        while (up := _parent_id(lineage[-1])) is not None:
            lineage.append(up)
        deleted_before = (
            any(overrides.get(i, _KEEP).delete for i in lineage) and parent not in just_grown
        )
        if parent is None or parent in just_grown or (final and not deleted_before):
            children = [c.id for c in tree.children(parent)] if parent in ids else []
            raise ConfigError(
                f"hierarchy.overrides names criterion {criterion_id!r}, which is not in the tree"
                + (f"; {parent!r} has {children}" if children else "")
            )
    removed: set[str] = set()
    for node in tree:
        override = overrides.get(node.id)
        if override is not None and override.delete:
            if node.parent is None:
                raise ConfigError(
                    f"hierarchy.overrides deletes aspect {node.id!r}; edit the aspects file "
                    "(data.criteria) and data.aspects instead"
                )
            removed.add(node.id)
        elif node.parent in removed:
            removed.add(node.id)
    nodes = []
    for node in tree:
        if node.id in removed:
            continue
        override = overrides.get(node.id)
        if override is not None:
            node = replace(
                node,
                name=override.name or node.name,
                definition=override.definition or node.definition,
            )
        nodes.append(node)
    return CriteriaTree(nodes)


_KEEP = CriterionOverride()


def pinned(overrides: Mapping[str, CriterionOverride]) -> set[str]:
    """Ids of the criteria a person pinned (never decomposed further)."""
    return {criterion_id for criterion_id, o in overrides.items() if o.pin}
