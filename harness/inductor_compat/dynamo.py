"""Dynamo's and Inductor's bookkeeping the runner reads: graph counts, mode options."""

from __future__ import annotations

from typing import Any


def reset_dynamo_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


def dynamo_graph_counts() -> dict[str, int]:
    """Graphs Dynamo compiled and graph breaks it took since the last reset (`torch._dynamo.utils.counters`)."""
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def graph_break_reasons(limit: int = 5) -> list[str]:
    """The most frequent graph-break reasons since the last reset, with their counts."""
    from torch._dynamo.utils import counters

    ranked = sorted(counters["graph_break"].items(), key=lambda item: -item[1])[:limit]
    return [f"{count}x {reason}" for reason, count in ranked]


def mode_options(mode: str) -> dict[str, Any]:
    """The Inductor options a torch.compile mode stands for (`torch._inductor.list_mode_options`)."""
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def inductor_option_names() -> set[str]:
    """Every Inductor config option of this torch (`torch._inductor.config.get_config_copy`)."""
    from torch._inductor import config as inductor_config

    return set(inductor_config.get_config_copy())
