# SPDX-License-Identifier: Apache-2.0
"""Functions the multi-process tests run on every rank (importable for spawned processes)."""
from __future__ import annotations

import torch

import dcp
import dcp.torch as dcpt
import reference


def shape_of(size: int) -> tuple[int, int]:
    """(nodes, devices per node) for a world of `size` ranks: two nodes when it divides evenly."""
    return (2, size // 2) if size % 2 == 0 and size > 2 else (1, size)


def attention_case(rank: int, size: int, case: dict) -> dict:
    """Plans case's batch, runs dcp attention forward and backward on this rank's tokens, and
    returns the local outputs with their batch positions."""
    nodes, per_node = shape_of(size)
    plan = dcp.plan(case["seqlens"], case["masks"], heads=case["heads"], kv_heads=case["kv_heads"],
                    head_dim=case["head_dim"], dtype=case["dtype"], block_size=case["block_size"],
                    cluster="cpu-local", nodes=nodes, devices_per_node=per_node,
                    strategy=case["strategy"], keep_kv=case.get("keep_kv"),
                    partial_dtype=case.get("partial_dtype"), seed=0)
    executor = dcpt.DCPExecutor(threads=1, kernels=case.get("kernels"),
                                **case.get("executor", {}))
    executor.prepare(plan)
    q, k, v, do = reference.inputs(sum(case["seqlens"]), case["heads"], case["kv_heads"],
                                   case["head_dim"], case["dtype"], case["seed"])
    positions = torch.from_numpy(plan.local_token_positions(rank))
    dtype = reference.TORCH_DTYPE[case["dtype"]]
    ql, kl, vl = (x[positions].to(dtype).requires_grad_() for x in (q, k, v))
    if case.get("packed_kv"):
        kv = torch.stack((kl, vl)).detach().requires_grad_()
        o = dcpt.DCPAttn.apply(executor, ql, kv)
        o.backward(do[positions].to(dtype))
        dk, dv = kv.grad[0], kv.grad[1]
        _, lse, _ = executor.forward(ql, kl, vl)
    else:
        o, lse = dcpt.attention(executor, ql, kl, vl, return_lse=True)
        o.backward(do[positions].to(dtype))
        dk, dv = kl.grad, vl.grad
    result = {"positions": positions, "o": o.detach(), "lse": lse, "dq": ql.grad, "dk": dk,
              "dv": dv, "strategy": plan.strategy, "kept_bytes": executor.kept_bytes,
              "partial_dtype": plan.partial_dtype}
    route = getattr(executor._triton, "route", None)
    if route is not None:
        result["route"] = route.summary()
    return result


def kinds_attention_case(rank: int, size: int, case: dict) -> dict:
    """Plans case's batch with its attention kinds (case["kinds"]: {name: mask}, case["layers"])
    and runs every kind forward and backward on this rank's tokens through one executor (the
    kinds in reverse order, the last with DCPAttn and its kind after kv). Returns per kind the
    local outputs, with the batch positions and the plan's bytes."""
    nodes, per_node = shape_of(size)
    plan = dcp.plan(case["seqlens"], case["kinds"], case["layers"], heads=case["heads"],
                    kv_heads=case["kv_heads"], head_dim=case["head_dim"], dtype=case["dtype"],
                    block_size=case["block_size"], cluster="cpu-local", nodes=nodes,
                    devices_per_node=per_node, strategy=case["strategy"], seed=0)
    executor = dcpt.DCPExecutor(threads=1, kernels=case.get("kernels"))
    executor.prepare(plan)
    q, k, v, do = reference.inputs(sum(case["seqlens"]), case["heads"], case["kv_heads"],
                                   case["head_dim"], case["dtype"], case["seed"])
    positions = torch.from_numpy(plan.local_token_positions(rank))
    dtype = reference.TORCH_DTYPE[case["dtype"]]
    out = {"positions": positions, "kinds": executor.kinds,
           "plan": torch.frombuffer(bytearray(plan.to_bytes()), dtype=torch.uint8)}
    for index, kind in enumerate(reversed(executor.kinds)):
        ql, kl, vl = (x[positions].to(dtype).requires_grad_() for x in (q, k, v))
        if index == len(executor.kinds) - 1:
            kv = torch.stack((kl, vl)).detach().requires_grad_()
            o = dcpt.DCPAttn.apply(executor, ql, kv, kind)
            o.backward(do[positions].to(dtype))
            dk, dv = kv.grad[0], kv.grad[1]
            _, lse, _ = executor.forward(ql, kl, vl, kind=kind)
        else:
            o, lse = dcpt.attention(executor, ql, kl, vl, return_lse=True, kind=kind)
            o.backward(do[positions].to(dtype))
            dk, dv = kl.grad, vl.grad
        out[kind] = {"o": o.detach(), "lse": lse, "dq": ql.grad, "dk": dk, "dv": dv}
    return out


def attention_cases(rank: int, size: int, cases: list[dict]) -> list[dict]:
    return [attention_case(rank, size, case) for case in cases]


def triton_and_cpu_cases(rank: int, size: int, cases: list[dict]) -> list[tuple[dict, dict]]:
    """Each case with the Triton kernels under Triton's interpreter (run_world's
    triton_interpreter) and with the cpu kernels (a case with "kinds": kinds_attention_case's)."""
    out = []
    for case in cases:
        run = kinds_attention_case if "kinds" in case else attention_case
        out.append((run(rank, size, dict(case, kernels="triton")),
                    run(rank, size, dict(case, kernels="cpu"))))
    return out


def flash_route_cases(rank: int, size: int, cases: list[dict]) -> list[tuple[dict, dict]]:
    """Each case on the Triton device under Triton's interpreter with the flash route (its kernel
    the fp64 emulation of FlashAttention's varlen contract, NaN in rows without a key), and on
    the cpu kernels."""
    from dcp.torch.kernels.varlen_kernels import EmulatedVarlenKernel
    out = []
    for case in cases:
        flash = dict(case, kernels="triton", executor=dict(
            attention_kernels="flash", _varlen_kernel=EmulatedVarlenKernel(empty_row="nan")))
        out.append((attention_case(rank, size, flash),
                    attention_case(rank, size, dict(case, kernels="cpu"))))
    return out


class AttentionStack(torch.nn.Module):
    """Layers of x + Wo attention(Wq x, Wk x, Wv x): the attention is a callable, so the same
    weights run through dcp and through dense attention."""

    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q = torch.nn.ModuleList(torch.nn.Linear(dim, heads * head_dim) for _ in range(layers))
        self.kv = torch.nn.ModuleList(torch.nn.Linear(dim, 2 * kv_heads * head_dim)
                                      for _ in range(layers))
        self.o = torch.nn.ModuleList(torch.nn.Linear(heads * head_dim, dim) for _ in range(layers))

    def layer(self, i: int, x: torch.Tensor, attn) -> torch.Tensor:
        t = x.shape[0]
        q = self.q[i](x).view(t, self.heads, self.head_dim)
        k, v = self.kv[i](x).view(t, 2, self.kv_heads, self.head_dim).unbind(1)
        return x + self.o[i](attn(q.contiguous(), k.contiguous(), v.contiguous()).reshape(t, -1))

    def forward(self, x: torch.Tensor, attn, checkpointed=()) -> torch.Tensor:
        for i in range(len(self.q)):
            if i in checkpointed:
                x = torch.utils.checkpoint.checkpoint(self.layer, i, x, attn, use_reentrant=False)
            else:
                x = self.layer(i, x, attn)
        return x


STACK = dict(layers=3, dim=24, heads=4, kv_heads=2, head_dim=8)


def stack_inputs(total: int):
    g = torch.Generator().manual_seed(5)
    return (torch.randn(total, STACK["dim"], generator=g, dtype=torch.float64),
            torch.randn(total, STACK["dim"], generator=g, dtype=torch.float64))


def stack_case(rank: int, size: int, seqlens: list[int], mask: str, checkpointed: list[int]):
    """Gradients of a 3-layer stack through dcp: this rank's share of the weight gradients (the
    loss is split over ranks by token) and its tokens' input gradients."""
    nodes, per_node = shape_of(size)
    plan = dcp.plan(seqlens, mask, heads=STACK["heads"], kv_heads=STACK["kv_heads"],
                    head_dim=STACK["head_dim"], dtype="fp32", block_size=8, cluster="cpu-local",
                    nodes=nodes, devices_per_node=per_node, strategy="dcp-pure")
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(plan)
    torch.manual_seed(0)
    model = AttentionStack(**STACK)
    x, weight = stack_inputs(sum(seqlens))
    positions = torch.from_numpy(plan.local_token_positions(rank))
    xl = x[positions].float().requires_grad_()
    out = model(xl, lambda q, k, v: dcpt.attention(executor, q, k, v), set(checkpointed))
    (out * weight[positions].float()).sum().backward()
    return {"positions": positions, "dx": xl.grad,
            "grads": [p.grad for p in model.parameters()]}


class TokenDataset(torch.utils.data.Dataset):
    """Samples of varied lengths whose tokens name their sample and position: token = 1000 *
    sample + position, so a batch's tokens show where each came from."""

    def __init__(self, lengths: list[int]):
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return 1000 * i + torch.arange(self.lengths[i])


LOADER_LENGTHS = [37, 5, 120, 1, 64, 17, 90, 33, 8, 71, 2, 50]
LOADER = dict(tokens_per_batch=160, heads=4, kv_heads=2, head_dim=8, dtype=torch.float32,
              block_size=16, cluster="cpu-local", seed=7, prefetch=2)


def loader_case(rank: int, size: int, epochs: int) -> list[dict]:
    nodes, per_node = shape_of(size)
    loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), lambda s: "causal", nodes=nodes,
                                epochs=epochs, **LOADER)
    out = []
    for local, plan in loader:
        out.append({"plan": torch.frombuffer(bytearray(plan.to_bytes()), dtype=torch.uint8),
                    "indices": local.batch_indices, "input_ids": local.input_ids,
                    "labels": local.labels, "position_ids": local.position_ids,
                    "loss_mask": local.loss_mask, "global_positions": local.global_positions,
                    "loss_tokens": local.loss_tokens, "seqlens": local.seqlens,
                    "epoch": local.epoch})
    return out


def loader_plans_case(rank: int, size: int, options: dict) -> list[tuple[list[int], bytes]]:
    """Each batch's (sequence lengths, plan bytes) of a loader on one node with `options`."""
    loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, nodes=1, **LOADER, **options)
    return [(local.seqlens, plan.to_bytes()) for local, plan in loader]


def dying_peer_case(rank: int, size: int) -> float:
    """Rank 1 dies (os._exit) before the first attention; the others must raise, not hang.
    Returns the seconds the attention ran before raising (never returns normally on ranks != 1)."""
    import os
    import time
    plan = dcp.plan([96], "causal", heads=2, kv_heads=1, head_dim=8, dtype="fp32", block_size=8,
                    cluster="cpu-local", nodes=1, devices_per_node=size, strategy="ring")
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(plan)
    if rank == 1:
        os._exit(3)
    n = executor.local_tokens
    q, kv = torch.randn(n, 2, 8), torch.randn(n, 1, 8)
    start = time.monotonic()
    try:
        for _ in range(50):
            dcpt.attention(executor, q, kv, kv)
    except RuntimeError as error:
        raise RuntimeError(f"after {time.monotonic() - start:.2f} s: {error}") from None
    return time.monotonic() - start


# --- training parity ----------------------------------------------------------------------------

TRAIN = dict(steps=50, tokens_per_batch=256, seed=0, lr=1e-3)


class RandomBytes(torch.utils.data.Dataset):
    """Byte-token samples of lengths 1..120, each from its own seed."""

    def __init__(self, count: int = 64):
        g = torch.Generator().manual_seed(11)
        self.lengths = torch.randint(1, 121, (count,), generator=g).tolist()

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 + i)
        return torch.randint(0, 256, (self.lengths[i],), generator=g)


# A model whose layers attend differently: each layer's attention kind, and each kind's mask.
KIND_TRAIN = dict(TRAIN, steps=12, masks={"full": "causal", "local": "sliding_window:window=16",
                                          "chunk": "chunked:chunk=24"},
                  layer_kinds=["local", "full", "chunk", "local"])


def train_config(kinds: bool = False):
    import gpt_model
    if kinds:
        return gpt_model.GPTConfig(dim=64, layers=len(KIND_TRAIN["layer_kinds"]), heads=4,
                                   kv_heads=2)
    return gpt_model.GPTConfig(dim=256, layers=3, heads=8, kv_heads=2)


def train_dcp(rank: int, size: int, kinds: bool = False) -> dict:
    """TRAIN["steps"] AdamW steps of the example GPT with attention through dcp, data parallel
    over the group (the loader's local tokens, the gradients and the loss all-reduced in one
    buffer, the loss normalised by the global loss-token count). With `kinds`, KIND_TRAIN's:
    every layer attends as its kind, every batch planned with every kind's mask and layer count.
    Returns the global loss of every step."""
    import gpt_model
    from train_gpt import sum_over_group
    setup = KIND_TRAIN if kinds else TRAIN
    config = train_config(kinds)
    nodes, per_node = shape_of(size)
    dataset = RandomBytes()
    if kinds:
        layer_kinds = setup["layer_kinds"]
        options = dict(layers={k: layer_kinds.count(k) for k in setup["masks"]})
        mask_fn = lambda s: dict(setup["masks"])  # noqa: E731
    else:
        options, mask_fn = {}, lambda s: "causal"  # noqa: E731
    loader = dcpt.DCPDataloader(dataset, mask_fn, tokens_per_batch=setup["tokens_per_batch"],
                                heads=config.heads, kv_heads=config.kv_heads,
                                head_dim=config.head_dim, dtype=torch.float32, block_size=16,
                                cluster="cpu-local", nodes=nodes, seed=setup["seed"], epochs=20,
                                **options)
    executor = dcpt.DCPExecutor(threads=1)
    if kinds:
        attn = [lambda q, k, v, kind=kind: dcpt.attention(executor, q, k, v, kind=kind)
                for kind in setup["layer_kinds"]]
    else:
        attn = lambda q, k, v: dcpt.attention(executor, q, k, v)  # noqa: E731
    torch.manual_seed(setup["seed"])
    model = gpt_model.GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup["lr"])
    losses, batches = [], []
    for step, (local, plan) in enumerate(loader):
        if step == setup["steps"]:
            break
        executor.prepare(plan)
        logits = model(local.input_ids, local.position_ids, attn)
        loss = gpt_model.loss_fn(logits, local.labels, local.loss_tokens)
        optimizer.zero_grad()
        loss.backward()
        losses.append(sum_over_group(model, loss))
        optimizer.step()
        batches.append(local.batch_indices)
    return {"losses": losses, "batches": batches, "loader_wait": loader.wait_seconds}


def train_dense(batches: list[list[int]], kinds: bool = False,
                masks: dict | None = None) -> list[float]:
    """The same model, seed and batches on one process with dense attention (SDPA), each layer
    under its kind's mask with `kinds` (KIND_TRAIN's masks, or `masks`)."""
    import gpt_model
    setup = KIND_TRAIN if kinds else TRAIN
    dataset = RandomBytes()
    torch.manual_seed(setup["seed"])
    model = gpt_model.GPT(train_config(kinds))
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup["lr"])
    losses = []
    for indices in batches:
        samples = [dataset[i] for i in indices]
        seqlens = [s.numel() for s in samples]
        tokens = torch.cat(samples)
        labels = gpt_model.make_labels(tokens, seqlens)
        if kinds:
            dense = {k: gpt_model.dense_attention(seqlens, m)
                     for k, m in (masks or setup["masks"]).items()}
            attn = [dense[kind] for kind in setup["layer_kinds"]]
        else:
            attn = gpt_model.dense_attention(seqlens)
        logits = model(tokens, gpt_model.make_positions(seqlens), attn)
        loss = gpt_model.loss_fn(logits, labels, int((labels != -100).sum()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def triton_head_dim_refusal(rank: int, size: int) -> str:
    """The message a Triton executor gives, at prepare, for a head dim its kernels cannot run."""
    plan = dcp.plan([40], "causal", heads=2, kv_heads=1, head_dim=512, dtype="bf16",
                    block_size=16, nodes=1, devices_per_node=size)
    executor = dcpt.DCPExecutor(kernels="triton")
    try:
        executor.prepare(plan)
    except ValueError as error:
        return str(error)
    return "prepared"
