"""The cases a TE history audits: the grouped MLP at a recipe, group count, shape, fused or not."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from memaudit.errors import UsageError
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

TARGET = "te-grouped-mlp"
SHAPES = {
    "small": (4096, 1024, 2048),
    "pr3545": (82944, 3072, 1536),
}
"""Named shapes (tokens, hidden, ffn): memaudit's default, and the shape of TE PR #3545's
measurement (T = 82,944, H = 3,072, F = 1,536)."""
FUSED_RECIPES = ("nvfp4", "mxfp8")
"""The recipes TE's fused grouped MLP takes (MXFP8 from PR #2769, NVFP4 from PR #3048)."""
UNFUSED_RECIPES = ("nvfp4", "mxfp8", "fp8-current")
RECIPES_HELP = (
    f"Recipes ({', '.join(dict.fromkeys((*FUSED_RECIPES, *UNFUSED_RECIPES)))}). Default: "
    f"{' and '.join(FUSED_RECIPES)} fused; {', '.join(UNFUSED_RECIPES)} unfused."
)
TREE_HELP = "A local TE source tree (transformer_engine/ beside build_tools/VERSION.txt). Repeatable."
"""``te-history``'s help for ``--recipes`` and ``--te-tree`` (TE's names stay in memaudit.te)."""


@dataclass(frozen=True)
class HistoryCase:
    """One case of a history."""

    recipe: str
    groups: int
    fused: bool
    tokens: int
    hidden: int
    ffn: int

    def spec(self, target: Any = None) -> CaseSpec:
        """The case as a spec of ``target`` (the TE target as configured; unconfigured where None),
        with its options and the fused switch per case."""
        target = target if target is not None else get_target(TARGET)
        return target.spec(
            self.recipe,
            self.groups,
            dtype="bf16",
            device="cuda",
            options={**target.options, "fused": self.fused},
            tokens=self.tokens,
            hidden=self.hidden,
            ffn=self.ffn,
        )

    @property
    def id(self) -> str:
        """The case id its report carries."""
        return self.spec().id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HistoryCase:
        return cls(**d)


def default_cases(shapes: tuple[str, ...] = ("small", "pr3545"), groups: tuple[int, ...] = (1, 8)) -> list[HistoryCase]:
    """The committed history's cases: fused NVFP4 and MXFP8, unfused NVFP4, MXFP8 and fp8-current,
    at each group count and shape."""
    out = []
    for shape in shapes:
        if shape not in SHAPES:
            raise UsageError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}", key="--shape")
        t, h, f = SHAPES[shape]
        for fused, recipes in ((True, FUSED_RECIPES), (False, UNFUSED_RECIPES)):
            for recipe in recipes:
                for g in groups:
                    out.append(HistoryCase(recipe, g, fused, t, h, f))
    return out
