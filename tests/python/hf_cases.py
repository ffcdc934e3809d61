# SPDX-License-Identifier: Apache-2.0
"""transformers models on dcp: what the multi-process tests run on every rank, and the one-process
sdpa baseline they are compared with (importable by spawned processes)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dcp.torch as dcpt
from dist_cases import shape_of
from worlds import compile_in_turn

HF_TRAIN = dict(steps=10, tokens_per_batch=384, max_len=256, block_size=32, seed=0, lr=3e-3)


def text_dataset():
    """Packed real text: byte samples of the license texts (examples/text_corpus.py)."""
    import text_corpus
    return text_corpus.ByteSequenceDataset(text_corpus.load_corpus(), max_len=HF_TRAIN["max_len"],
                                           min_len=8, seed=0, mean_len=96)


def train_hf_dcp(rank: int, size: int, families: list[str]) -> dict:
    """HF_TRAIN["steps"] AdamW steps of each family's tiny model on dcp (attn_implementation
    "dcp", the model's own loss with dcp.torch.hf.loss_kwargs), data parallel over the group.
    Returns per family the global loss of every step, the batches, the first step's summed
    gradients, and the largest gap between the model's loss and F.cross_entropy's."""
    import dcp.torch.hf as dcphf
    import hf_models
    from train_gpt import sum_over_group
    dcphf.register()
    nodes, _ = shape_of(size)
    dataset = text_dataset()
    out = {}
    for family in families:
        model = hf_models.build_model(family, "dcp", seed=HF_TRAIN["seed"])
        model.train()
        loader = dcpt.DCPDataloader(dataset, tokens_per_batch=HF_TRAIN["tokens_per_batch"],
                                    dtype=torch.float32, block_size=HF_TRAIN["block_size"],
                                    cluster="cpu-local", nodes=nodes, seed=HF_TRAIN["seed"],
                                    **dcphf.plan_options(model.config))
        executor = dcpt.DCPExecutor(threads=1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
        losses, batches, gap, first_grads = [], [], 0.0, None
        for step, (lb, plan) in enumerate(loader):
            if step == HF_TRAIN["steps"]:
                break
            executor.prepare(plan)
            result = model(input_ids=lb.input_ids[None], position_ids=lb.position_ids[None],
                           dcp_executor=executor, use_cache=False, **dcphf.loss_kwargs(lb))
            summed = F.cross_entropy(result.logits[0].float(), lb.labels, ignore_index=-100,
                                     reduction="sum") / lb.loss_tokens
            gap = max(gap, abs(result.loss.item() - summed.item()))
            optimizer.zero_grad()
            result.loss.backward()
            total = sum_over_group(model, result.loss)  # the gradients too
            if first_grads is None:
                first_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
            optimizer.step()
            losses.append(total)
            batches.append(lb.batch_indices)
        out[family] = {"losses": losses, "batches": batches, "gap": gap,
                       "grads": first_grads if rank == 0 else {}, "kinds": len(executor.kinds)}
    return out


def layer_kinds(family: str) -> list[str]:
    """The attention kind of every layer of the family's tiny model."""
    import dcp.torch.hf as dcphf
    import hf_models
    return dcphf.attention_kinds(hf_models.tiny_config(family))[1]


def train_hf_dense(family: str, batches: list[list[int]], dataset=None) -> dict:
    """The same model, seed and batches (of `dataset`, default text_dataset()) on one process with
    attn_implementation="sdpa", fed each packed batch with position ids that restart at every
    document (transformers then builds the block-diagonal mask itself)."""
    import gpt_model
    import hf_models
    dataset = text_dataset() if dataset is None else dataset
    model = hf_models.build_model(family, "sdpa", seed=HF_TRAIN["seed"])
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
    losses, first_grads = [], None
    for indices in batches:
        samples = [dataset[i] for i in indices]
        seqlens = [s.numel() for s in samples]
        tokens = torch.cat(samples)
        labels = gpt_model.make_labels(tokens, seqlens)
        logits = model(input_ids=tokens[None], position_ids=gpt_model.make_positions(seqlens)[None],
                       use_cache=False).logits[0]
        loss = gpt_model.loss_fn(logits, labels, int((labels != -100).sum()))
        optimizer.zero_grad()
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "grads": first_grads}


COMPILE = dict(batches=10, tokens_per_batch=256, block_size=16, seed=0, lr=1e-3)
# Two batches of one sequence each, one block at block size 32: on 2 ranks dcp's own plan places
# each whole, so one rank holds no tokens.
EMPTY_COMPILED = [20, 24]


def _compile_counters() -> dict:
    from torch._dynamo.utils import counters
    return {"graph_breaks": sum(counters["graph_break"].values()),
            "graphs": counters["stats"]["unique_graphs"],
            "frames": counters["stats"]["calls_captured"] > 0}


def compiled_against_eager(rank: int, size: int) -> dict:
    """dcp's example GPT and a transformers Llama, each trained AdamW steps on dcp twice from the
    same weights: eagerly, and compiled with torch.compile(fullgraph=True, dynamic=True) on
    inductor, the ranks compiling in turn (compile_in_turn). Both train on COMPILE["batches"]
    batches of different sizes; the Llama, called as model(**model_inputs(...)) with its own loss,
    then on EMPTY_COMPILED's batches, which leave one rank without tokens. Returns per model both
    runs' local and global losses, the compiled run's graph and graph-break counts after the first
    COMPILE["batches"] batches and after all, and this rank's token counts."""
    import torch._dynamo

    import dcp.torch.hf as dcphf
    import gpt_model
    import hf_models
    import scale_cases
    from train_gpt import sum_over_group
    dcphf.register()
    nodes, _ = shape_of(size)
    dataset = text_dataset()
    out = {}
    for name in ("gpt", "llama"):
        def build():
            if name == "gpt":
                torch.manual_seed(COMPILE["seed"])
                return gpt_model.GPT(gpt_model.GPTConfig(dim=64, layers=2, heads=4, kv_heads=2))
            return hf_models.build_model(name, "dcp", seed=COMPILE["seed"])

        if name == "gpt":
            options = dict(heads=4, kv_heads=2, head_dim=16)
        else:
            options = dcphf.plan_options(hf_models.tiny_config(name))
        loader = dcpt.DCPDataloader(dataset, tokens_per_batch=COMPILE["tokens_per_batch"],
                                    dtype=torch.float32, block_size=COMPILE["block_size"],
                                    cluster="cpu-local", nodes=nodes, seed=COMPILE["seed"],
                                    **options)
        batches = []
        for step, item in enumerate(loader):
            if step == COMPILE["batches"]:
                break
            batches.append(item)
        if name == "llama":
            batches += list(scale_cases.make_loader(
                hf_models.tiny_config(name), "pool", scale_cases.SlicedText(EMPTY_COMPILED),
                shuffle=False, tokens_per_batch=max(EMPTY_COMPILED), block_size=32,
                strategy="dcp-pure"))
        executor = dcpt.DCPExecutor(threads=1)
        attn = lambda q, k, v: dcpt.attention(executor, q, k, v)  # noqa: E731

        def run(model, counters: list | None = None) -> dict:
            optimizer = torch.optim.AdamW(model.parameters(), lr=COMPILE["lr"])
            local, total = [], []
            for step, (lb, plan) in enumerate(batches):
                if counters is not None and step == COMPILE["batches"]:
                    counters.append(_compile_counters())
                executor.prepare(plan)
                if name == "gpt":
                    logits = model(lb.input_ids, lb.position_ids, attn)
                    loss = gpt_model.loss_fn(logits, lb.labels, lb.loss_tokens)
                else:
                    loss = model(**dcphf.model_inputs(lb, executor)).loss
                optimizer.zero_grad()
                loss.backward()
                total.append(sum_over_group(model, loss))
                optimizer.step()
                local.append(loss.item())
            if counters is not None:
                counters.append(_compile_counters())
            return dict(local=local, total=total)

        eager = run(build())
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compile_in_turn()
        counters: list = []
        compiled = run(torch.compile(build(), fullgraph=True, dynamic=True), counters)
        out[name] = {"eager": eager, "compiled": compiled, "counters": counters,
                     "tokens": [lb.input_ids.numel() for lb, _ in batches]}
    return out
