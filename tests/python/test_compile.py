# SPDX-License-Identifier: Apache-2.0
"""torch.compile(fullgraph=True) of models whose attention runs on dcp, on 2 gloo ranks with
inductor on the CPU: dcp's example GPT and a transformers Llama compile with no graph break into
one graph that serves 10 batches of different sizes (no recompilation), and train with the
eager run's losses (1e-6 relative, fp32); the Llama then runs on a rank the plan leaves without
tokens."""
from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

import hf_cases  # noqa: E402
from worlds import run_world_once  # noqa: E402


@functools.lru_cache(maxsize=None)
def _compiled() -> list:
    return run_world_once("compiled", 2, hf_cases.compiled_against_eager, timeout=900,
                          group_timeout=300)


# The first test asks for the world that both read (run_world_once); it starts among the long
# tests (conftest.py), so the other finds the results ready.
@pytest.mark.seconds(40)
def test_compiled_models_match_eager_without_graph_breaks_or_recompiles() -> None:
    first = slice(0, hf_cases.COMPILE["batches"])
    for rank, result in enumerate(_compiled()):
        for name, got in result.items():
            where = f"rank {rank} {name}"
            counters = got["counters"][0]  # after the first COMPILE["batches"] batches
            assert counters["frames"], where
            assert counters["graph_breaks"] == 0, where
            assert counters["graphs"] == 1, f"{where}: {counters['graphs']} graphs for 10 batches"
            tokens = got["tokens"][first]
            assert len(set(tokens)) >= 5, f"{where}: batch sizes {tokens}"
            pairs = list(zip(got["compiled"]["local"][first], got["eager"]["local"][first]))
            assert len(pairs) == hf_cases.COMPILE["batches"], where
            for step, (a, b) in enumerate(pairs):
                assert abs(a - b) <= 1e-6 * abs(b), f"{where} step {step}: {a} vs eager {b}"


def test_a_rank_without_tokens_runs_compiled() -> None:
    """The compiled Llama goes on to batches that leave one rank without tokens: that rank runs
    a stand-in token (model_inputs), for which dynamo compiles one more graph (it specializes
    sizes of 0 and 1), with no graph break; the other rank compiles none; the global losses are
    the eager run's."""
    rest = slice(hf_cases.COMPILE["batches"], None)
    llama = [result["llama"] for result in _compiled()]
    empty = [all(n == 0 for n in got["tokens"][rest]) for got in llama]
    assert any(empty), [got["tokens"][rest] for got in llama]
    for rank, got in enumerate(llama):
        counters = got["counters"][-1]
        assert counters["graph_breaks"] == 0, rank
        assert counters["graphs"] == (2 if empty[rank] else 1), (rank, counters)
        assert len(got["compiled"]["total"][rest]) == len(hf_cases.EMPTY_COMPILED)
        for a, b in zip(got["compiled"]["total"][rest], got["eager"]["total"][rest]):
            assert abs(a - b) <= 1e-5 * abs(b), (rank, got["compiled"], got["eager"])


def test_attention_kinds_compile_without_graph_breaks() -> None:
    """Two layers of different attention kinds, compiled whole (one process, aot_eager: dcp's ops
    with their fake implementations and autograd formula), over two batches of different sizes:
    one graph, no graph break, the eager run's outputs and gradients."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    import dcp
    import dcp.torch as dcpt

    executor = dcpt.DCPExecutor(threads=1)

    def layers(q, k, v):
        o = dcpt.attention(executor, q, k, v, kind="local")
        return dcpt.DCPAttn.apply(executor, o, torch.stack((k, v)), "full")

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(layers, fullgraph=True, dynamic=True, backend="aot_eager")
    for seqlens in ([30, 9], [17, 40, 3]):
        plan = dcp.plan(seqlens, {"full": "causal", "local": "sliding_window:window=6"},
                        {"local": 2}, heads=2, kv_heads=1, head_dim=8, dtype="fp32",
                        block_size=8, cluster="cpu-local", nodes=1, devices_per_node=1)
        executor.prepare(plan)
        n = executor.local_tokens
        g = torch.Generator().manual_seed(n)
        inputs = [torch.randn(n, h, 8, generator=g) for h in (2, 1, 1)]
        runs = []
        for fn in (layers, compiled):
            q, k, v = (x.clone().requires_grad_() for x in inputs)
            o = fn(q, k, v)
            o.square().sum().backward()
            runs.append([o.detach(), q.grad, k.grad, v.grad])
        for got, want in zip(*runs[::-1]):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert sum(counters["graph_break"].values()) == 0
    assert counters["stats"]["unique_graphs"] == 1


def test_transformers_layers_of_two_kinds_compile_without_graph_breaks() -> None:
    """dcp's transformers attention function on the layers of a Gemma 3 config (sliding-window
    and full), compiled whole (one process, aot_eager): each layer finds its kind while tracing,
    with no graph break, and computes what it computes eagerly."""
    import torch
    import torch._dynamo
    import transformers
    from torch._dynamo.utils import counters

    import dcp
    import dcp.torch as dcpt
    import dcp.torch.hf as dcphf

    config = transformers.Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=6,
        sliding_window_pattern=2)

    class Layer(torch.nn.Module):  # what transformers hands the attention function
        def __init__(self, index: int):
            super().__init__()
            self.config, self.layer_idx, self.is_causal = config, index, True

    modules = [Layer(0), Layer(1)]
    executor = dcpt.DCPExecutor(threads=1)

    def layers(q, k, v):  # q (1, heads, tokens, head dim), k and v (1, kv heads, tokens, d)
        for module in modules:
            o, _ = dcphf.dcp_attention(module, q, k, v, None, dcp_executor=executor)
            q = o.transpose(1, 2)
        return q

    opts = dcphf.plan_options(config)
    assert opts["layers"] == {"sliding_attention": 1, "full_attention": 1}
    plan = dcp.plan([30, 9], opts["mask_fn"](None), opts["layers"], heads=2, kv_heads=1,
                    head_dim=8, dtype="fp32", block_size=8, cluster="cpu-local", nodes=1,
                    devices_per_node=1)
    executor.prepare(plan)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, 39, 8, generator=g) for h in (2, 1, 1))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(layers, fullgraph=True, backend="aot_eager")
    windowed = compiled(q, k, v)
    torch.testing.assert_close(windowed, layers(q, k, v), rtol=1e-6, atol=1e-6)
    assert sum(counters["graph_break"].values()) == 0
    # The kinds' masks come from the plan: with both kinds causal, the same graph gives another
    # output, eager's.
    executor.prepare(dcp.plan([30, 9], {"sliding_attention": "causal", "full_attention": "causal"},
                              heads=2, kv_heads=1, head_dim=8, dtype="fp32", block_size=8,
                              cluster="cpu-local", nodes=1, devices_per_node=1))
    causal = compiled(q, k, v)
    torch.testing.assert_close(causal, layers(q, k, v), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(causal, windowed)
    assert counters["stats"]["unique_graphs"] == 1
