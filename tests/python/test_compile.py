# SPDX-License-Identifier: Apache-2.0
"""torch.compile(fullgraph=True) of models whose attention runs on dcp, on 2 gloo ranks with
inductor on the CPU: dcp's example GPT and a transformers Llama compile with no graph break into
one graph that serves 10 batches of different sizes (no recompilation), and train with the
eager run's losses (1e-6 relative, fp32)."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import hf_cases  # noqa: E402
from worlds import run_world  # noqa: E402


def test_compiled_models_match_eager_without_graph_breaks_or_recompiles() -> None:
    ranks = run_world(2, hf_cases.compiled_against_eager, timeout=900, group_timeout=300)
    for rank, result in enumerate(ranks):
        for name, got in result.items():
            where = f"rank {rank} {name}"
            assert got["frames"], where
            assert got["graph_breaks"] == 0, where
            assert got["graphs"] == 1, f"{where}: {got['graphs']} graphs for 10 batches"
            assert len(got["tokens"]) >= 5, f"{where}: batch sizes {got['tokens']}"
            assert len(got["compiled"]) == hf_cases.COMPILE["batches"], where
            for step, (a, b) in enumerate(zip(got["compiled"], got["eager"])):
                assert abs(a - b) <= 1e-6 * abs(b), f"{where} step {step}: {a} vs eager {b}"
