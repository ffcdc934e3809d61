# SPDX-License-Identifier: Apache-2.0
"""dcp.torch.kernels.triton_kernels against fp64 torch references: under Triton's CPU interpreter
everywhere, and compiled for the GPU where one is present.

The interpreter must be chosen before triton is imported, and other test modules of the same
pytest session may have imported it already, so the parent session runs one test that re-runs
this file in a fresh process with TRITON_INTERPRET=1; the kernel checks run only there. On a
machine with CUDA a second child runs the same checks on the GPU (DCP_TRITON_KERNEL_DEVICE=cuda,
no interpreter): every kernel call gets CUDA copies of its tensors and its results are copied
back, so one set of tests, written on CPU tensors, checks both."""
import importlib
import math
import os
import subprocess
import sys

_CHILD = os.environ.get("DCP_TRITON_INTERPRETER_CHILD") == "1"
_ON_CUDA = os.environ.get("DCP_TRITON_KERNEL_DEVICE") == "cuda"
if _CHILD and not _ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (the parent also sets it)

# Imported once TRITON_INTERPRET is set, which must precede importing triton (torch may import it).
import pytest  # noqa: E402
import torch  # noqa: E402

interpreted = pytest.mark.skipif(not _CHILD, reason="runs in a child process")


def _run_child(env):
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
               "--durations=5"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    print(result.stdout[-4000:])
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]


@pytest.mark.seconds(35)
@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_kernels_under_the_interpreter():
    _run_child(dict(os.environ, TRITON_INTERPRET="1", DCP_TRITON_INTERPRETER_CHILD="1"))


@pytest.mark.skipif(_CHILD or not torch.cuda.is_available(), reason="needs a CUDA device")
def test_kernels_on_cuda():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    _run_child(dict(env, DCP_TRITON_INTERPRETER_CHILD="1", DCP_TRITON_KERNEL_DEVICE="cuda"))


class _OnCuda:
    """triton_kernels with every tensor argument copied to the GPU for the call and back after
    it (the kernels write into the arena and into local tensors)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        function = getattr(self._module, name)
        if not callable(function):
            return function

        def call(*args, **kwargs):
            moved = {}

            def to_cuda(x):
                if not isinstance(x, torch.Tensor):
                    return x
                if id(x) not in moved:  # one copy of a tensor passed twice
                    moved[id(x)] = (x, x.cuda())
                return moved[id(x)][1]

            result = function(*[to_cuda(a) for a in args],
                              **{k: to_cuda(v) for k, v in kwargs.items()})
            torch.cuda.synchronize()
            for host, device in moved.values():
                host.copy_(device.cpu())
            return result

        return call


tk = importlib.import_module("dcp.torch.kernels.triton_kernels") if _CHILD else None
if _CHILD and _ON_CUDA:
    tk = _OnCuda(tk)

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}


# --- building arenas and tables by hand --------------------------------------------------------

class Arena:
    """Places values at 64-byte aligned offsets; the unwritten bytes are 0xFF (NaN as floats), so
    a kernel that reads what it should overwrite shows up."""

    def __init__(self):
        self.size = 0
        self.values = []

    def reserve(self, nbytes):
        offset = self.size
        self.size += -(-max(nbytes, 1) // 64) * 64
        return offset

    def place(self, *parts):
        """Puts the tensors one after the other (a slot value); returns its offset."""
        flat = [part.contiguous().reshape(-1).view(torch.uint8) for part in parts]
        offset = self.reserve(sum(p.numel() for p in flat))
        self.values.append((offset, torch.cat(flat)))
        return offset

    def build(self):
        arena = torch.full((self.size + 64,), 0xFF, dtype=torch.uint8)
        for offset, data in self.values:
            arena[offset:offset + data.numel()] = data
        return arena


def read(arena, offset, dtype, *shape):
    count = math.prod(shape)
    nbytes = count * torch.tensor([], dtype=dtype).element_size()
    return arena[offset:offset + nbytes].view(dtype).reshape(shape).clone()


def copy_rows(*copies):
    """A copy table: (slot_off, token, tokens, head_block) per copy."""
    return tk.table("copy_rows", [dict(slot_off=slot, token=token, tokens=tokens, head_block=head)
                                  for slot, token, tokens, head in copies])


def memory_rows(*rows):
    """A memory table: (dst_off, src_off, count) per Merge or Sum."""
    return tk.table("memory_rows", [dict(dst_off=dst, src_off=src, count=count)
                                    for dst, src, count in rows])


def wire_rows(*rows):
    """A wire table: (slot_off, wire_off, elements, tail_bytes) per partial."""
    return tk.table("wire_rows", [dict(slot_off=slot, wire_off=wire, elements=elements,
                                       tail_bytes=tail) for slot, wire, elements, tail in rows])


class Tables:
    """entries, groups, members and CSR masks as the C++ lowering lays them out."""

    def __init__(self):
        self.entries, self.members, self.mask_rows, self.intervals = [], [], [], []

    def mask(self, rows):
        """rows: per q row, a list of (begin, end) intervals. Returns the mask's row start."""
        start = len(self.mask_rows)
        for row in rows:
            self.mask_rows.append(len(self.intervals) // 2)
            for begin, end in row:
                self.intervals += [begin, end]
        self.mask_rows.append(len(self.intervals) // 2)
        return start

    def entry(self, q_off, kv_off, q_tokens, kv_tokens, rows=None):
        mask = -1 if rows is None else self.mask(rows)
        self.entries.append(dict(q_off=q_off, kv_off=kv_off, q_tokens=q_tokens,
                                 kv_tokens=kv_tokens, mask=mask, q_group=0, kv_group=0,
                                 kv_buffer=tk.BUFFERS["arena"]))
        return len(self.entries) - 1

    def groups(self, rows, name="q_groups"):
        """rows: (out_off, tokens, accumulate, entry indices); name: q_groups or kv_groups."""
        table = []
        for out_off, tokens, accumulate, members in rows:
            table.append(dict(out_off=out_off, tokens=tokens, accumulate=int(accumulate),
                              member_begin=len(self.members),
                              member_end=len(self.members) + len(members), input_off=0))
            self.members += list(members)
        return tk.table(name, table)

    def tensors(self):
        return dict(entries=tk.table("entries", self.entries),
                    members=torch.tensor(self.members, dtype=torch.int64),
                    mask_rows=torch.tensor(self.mask_rows, dtype=torch.int32),
                    mask_intervals=torch.tensor(self.intervals, dtype=torch.int32))


# --- masks and fp64 references ----------------------------------------------------------------

def random_rows(q_tokens, kv_tokens, generator):
    """Per row 0 to 3 sorted, disjoint, non-empty intervals; some rows fully masked, some full."""
    rows = []
    for _ in range(q_tokens):
        kind = int(torch.randint(0, 6, (1,), generator=generator))
        if kind == 0:
            rows.append([])
        elif kind == 1:
            rows.append([(0, kv_tokens)])
        else:
            count = min(kind - 1, (kv_tokens + 1) // 2)
            cuts = sorted(torch.randperm(kv_tokens + 1, generator=generator)[:2 * count].tolist())
            rows.append([(cuts[2 * i], cuts[2 * i + 1]) for i in range(count)])
    return rows


def causal_rows(q_tokens, kv_tokens):
    """Bottom-right aligned causal mask (the last q row sees every key)."""
    return [[(0, min(kv_tokens, kv_tokens - q_tokens + r + 1))]
            if kv_tokens - q_tokens + r + 1 > 0 else [] for r in range(q_tokens)]


def band_rows(q_tokens, kv_tokens, band):
    """Bands of `band` rows that read every key, the first half of the keys, or none: where the
    kernel's q sub-blocks are `band` rows (16 under the interpreter, 64 on a GPU), one kv
    sub-block's q sub-blocks form several runs of whole sub-blocks with gaps and cut ones
    between."""
    kinds = [[(0, kv_tokens)], [(0, kv_tokens)], [], [(0, kv_tokens // 2)], [(0, kv_tokens)]]
    return [kinds[(r // band) % len(kinds)] for r in range(q_tokens)]


def dense(rows, q_tokens, kv_tokens):
    mask = torch.zeros(q_tokens, kv_tokens, dtype=torch.bool)
    if rows is None:
        mask[:] = True
    else:
        for r, row in enumerate(rows):
            for begin, end in row:
                mask[r, begin:end] = True
    return mask


def expand_kv(x, heads):
    """[t][hk][d] -> [t][heads][d]: q head j reads kv head j // (heads / hk)."""
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def reference_forward(q, parts, scale):
    """o [t][h][d], lse [h][t] in fp64 over the union of parts' keys; parts: (k, v, mask)."""
    heads = q.shape[1]
    k = torch.cat([expand_kv(p[0], heads) for p in parts]).double()
    v = torch.cat([expand_kv(p[1], heads) for p in parts]).double()
    mask = torch.cat([p[2] for p in parts], dim=1)
    s = torch.einsum("thd,khd->htk", q.double(), k) * scale
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("htk,khd->thd", p, v), lse


def reference_backward(q, do, lse, delta, k, v, mask, scale):
    """One entry's dq [t][h][d], dk, dv [kt][hk][d] in fp64 from the given lse and delta."""
    heads, kv_heads = q.shape[1], k.shape[1]
    q, do, lse, delta = q.double(), do.double(), lse.double(), delta.double()
    ke, ve = expand_kv(k, heads).double(), expand_kv(v, heads).double()
    s = (torch.einsum("thd,khd->htk", q, ke) * scale).masked_fill(~mask, -math.inf)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0).masked_fill(~mask, 0.0)
    dp = torch.einsum("thd,khd->htk", do, ve)
    ds = p * (dp - delta[..., None])
    dq = torch.einsum("htk,khd->thd", ds, ke) * scale
    dk = torch.einsum("htk,thd->khd", ds, q) * scale
    dv = torch.einsum("htk,thd->khd", p, do)
    fold = lambda x: x.reshape(x.shape[0], kv_heads, heads // kv_heads, -1).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def assert_close(actual, expected, dtype, what=""):
    expected = expected.double()
    actual = actual.double()
    assert not actual.isnan().any(), f"{what}: NaN"
    finite = expected.isfinite()
    assert torch.equal(finite, actual.isfinite()), f"{what}: infinities differ"
    scale = expected[finite].abs().max().item() if finite.any() else 0.0
    error = (actual[finite] - expected[finite]).abs().max().item() if finite.any() else 0.0
    assert error <= TOLERANCE[dtype] * max(scale, 1e-30), f"{what}: error {error} scale {scale}"
    assert torch.equal(actual[~finite], expected[~finite]), f"{what}: infinities differ"


def randn(generator, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


# --- copies, merges and sums ------------------------------------------------------------------

@interpreted
@pytest.mark.parametrize("dtype,head_dim", [(torch.float32, 64), (torch.bfloat16, 128),
                                            (torch.float16, 40)])
def test_loads(dtype, head_dim):
    g = torch.Generator().manual_seed(1)
    T, H = 23, 5
    q, k, v, o, do = (randn(g, T, H, head_dim, dtype=dtype) for _ in range(5))
    lse = randn(g, H, T)
    lse[1, 3] = -math.inf
    token, tokens, head, heads = 4, 17, 1, 3
    layout = Arena()
    q_off = layout.reserve(tokens * heads * head_dim * q.element_size())
    kv_off = layout.reserve(2 * tokens * heads * head_dim * q.element_size())
    grad_off = layout.reserve(2 * tokens * heads * head_dim * q.element_size() + 8 * tokens * heads)
    arena = layout.build()
    tk.load_q_copies(arena, copy_rows((q_off, token, tokens, head)), q, heads, tokens)
    tk.load_kv_copies(arena, copy_rows((kv_off, token, tokens, head)), k, v, heads, tokens)
    tk.load_qgrad_copies(arena, copy_rows((grad_off, token, tokens, head)), q, do, o, lse, heads,
                         tokens)
    window = (slice(token, token + tokens), slice(head, head + heads))
    shape = (tokens, heads, head_dim)
    value = math.prod(shape)
    assert torch.equal(read(arena, q_off, dtype, *shape), q[window])
    assert torch.equal(read(arena, kv_off, dtype, 2, *shape), torch.stack([k[window], v[window]]))
    assert torch.equal(read(arena, grad_off, dtype, 2, *shape),
                       torch.stack([q[window], do[window]]))
    stats = read(arena, grad_off + 2 * value * q.element_size(), torch.float32, 2, heads, tokens)
    assert torch.equal(stats[0], lse[head:head + heads, token:token + tokens])
    delta = (o[window].double() * do[window].double()).sum(-1).T
    assert_close(stats[1], delta, torch.float32, "delta")


@interpreted
@pytest.mark.parametrize("dtype,head_dim", [(torch.float32, 64), (torch.bfloat16, 128),
                                            (torch.float16, 64)])
def test_stores(dtype, head_dim):
    g = torch.Generator().manual_seed(2)
    T, H = 21, 4
    token, tokens, head, heads = 3, 13, 1, 2
    shape = (tokens, heads, head_dim)
    o, dk, dv = (randn(g, *shape) * 10 for _ in range(3))
    o[0, 0, :4] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 65504.0])  # ties
    lse = randn(g, heads, tokens)
    lse[0, 2] = -math.inf
    layout = Arena()
    out_off = layout.place(o, lse)
    dkv_off = layout.place(dk, dv)
    arena = layout.build()
    out = torch.full((T, H, head_dim), 7.0, dtype=dtype)
    local_lse = torch.full((H, T), 7.0)
    grads = [torch.full((T, H, head_dim), 7.0, dtype=dtype) for _ in range(2)]
    tk.store_q_copies(arena, copy_rows((out_off, token, tokens, head)), out, heads, tokens,
                      lse=local_lse)
    tk.store_kv_copies(arena, copy_rows((dkv_off, token, tokens, head)), *grads, heads, tokens)
    window = (slice(token, token + tokens), slice(head, head + heads))
    expected = torch.full_like(out, 7.0)
    expected[window] = o.to(dtype)  # torch rounds to nearest even, as the GPU does
    assert torch.equal(out, expected)
    expected_lse = torch.full_like(local_lse, 7.0)
    expected_lse[head:head + heads, token:token + tokens] = lse
    assert torch.equal(local_lse, expected_lse)
    for grad, value in zip(grads, (dk, dv)):
        expected[window] = value.to(dtype)
        assert torch.equal(grad, expected)
    plain = torch.zeros_like(out)
    tk.store_q_copies(arena, copy_rows((out_off, token, tokens, head)), plain, heads,
                      tokens)  # kDQ: no lse
    assert torch.equal(plain[window], o.to(dtype))


@interpreted
@pytest.mark.parametrize("dtype,head_dim", [(torch.bfloat16, 64), (torch.float32, 40)])
def test_copy_tables_run_many_copies_in_one_launch(dtype, head_dim):
    """A run's rows in one launch: copies of different token counts and head blocks (head index
    x head_scale), each into its own slot, or from its own slot into its own window."""
    g = torch.Generator().manual_seed(5)
    T, H, h = 40, 4, 2  # local tokens, all heads, heads per block (head_scale)
    q, o_local, do = (randn(g, T, H, head_dim, dtype=dtype) for _ in range(3))
    lse_local = randn(g, H, T)
    copies = [(0, 5, 0), (5, 17, 1), (30, 9, 0)]  # token, tokens, head block
    layout = Arena()
    size = torch.tensor([], dtype=dtype).element_size()
    q_offs = [layout.reserve(n * h * head_dim * size) for _, n, _ in copies]
    grad_offs = [layout.reserve(2 * n * h * head_dim * size + 8 * n * h) for _, n, _ in copies]
    values = [(randn(g, n, h, head_dim) * 10, randn(g, h, n)) for _, n, _ in copies]
    out_offs = [layout.place(o, lse) for o, lse in values]
    arena = layout.build()

    def table(offsets):
        return copy_rows(*((off, t, n, b) for off, (t, n, b) in zip(offsets, copies)))

    most = max(n for _, n, _ in copies)
    tk.load_q_copies(arena, table(q_offs), q, h, most, head_scale=h)
    tk.load_qgrad_copies(arena, table(grad_offs), q, do, o_local, lse_local, h, most,
                         head_scale=h)
    out = torch.full((T, H, head_dim), 7.0, dtype=dtype)
    lse = torch.full((H, T), 7.0)
    tk.store_q_copies(arena, table(out_offs), out, h, most, head_scale=h, lse=lse)
    expected, expected_lse = torch.full_like(out, 7.0), torch.full_like(lse, 7.0)
    for (t, n, b), q_off, grad_off, (o, o_lse) in zip(copies, q_offs, grad_offs, values):
        window = (slice(t, t + n), slice(b * h, b * h + h))
        assert torch.equal(read(arena, q_off, dtype, n, h, head_dim), q[window])
        assert torch.equal(read(arena, grad_off, dtype, 2, n, h, head_dim),
                           torch.stack([q[window], do[window]]))
        stats = read(arena, grad_off + 2 * n * h * head_dim * size, torch.float32, 2, h, n)
        assert torch.equal(stats[0], lse_local[b * h:b * h + h, t:t + n])
        expected[window] = o.to(dtype)
        expected_lse[b * h:b * h + h, t:t + n] = o_lse
    assert torch.equal(out, expected)
    assert torch.equal(lse, expected_lse)
    width = len(tk.TABLES["copy_rows"])
    for bad, words in ((torch.zeros(2, width - 1, dtype=torch.int64), f"int64 [n, {width}]"),
                       (torch.zeros(2, width, dtype=torch.int32), f"int64 [n, {width}]")):
        with pytest.raises(ValueError, match=words.replace("[", r"\[")):
            tk.load_q_copies(arena, bad, q, h, most)


@interpreted
@pytest.mark.parametrize("wire_dtype", [torch.bfloat16, torch.float16])
def test_wire_tables_narrow_and_widen_a_launchs_partials_in_one_launch(wire_dtype):
    """Rows of a wire table: a dk/dv-like partial (no tail) and o-like ones (the lse, the tail,
    travels as fp32; after an odd number of 2-byte values it is not 4-byte aligned), narrowed to
    the wire dtype (nearest even) and widened back."""
    g = torch.Generator().manual_seed(6)
    parts = [(randn(g, 96) * 10, None), (randn(g, 40) * 10, randn(g, 5)),
             (randn(g, 41) * 10, randn(g, 3))]
    parts[0][0][:4] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 65504.0])  # ties
    layout = Arena()
    width = torch.tensor([], dtype=wire_dtype).element_size()
    slots = [layout.place(v, *([] if t is None else [t])) for v, t in parts]
    wires = [layout.reserve(v.numel() * width + (0 if t is None else 4 * t.numel()))
             for v, t in parts]
    back = [layout.reserve(4 * (v.numel() + (0 if t is None else t.numel()))) for v, t in parts]
    arena = layout.build()

    def table(sources, targets):
        return wire_rows(*((src, dst, v.numel(), 0 if t is None else 4 * t.numel())
                           for src, dst, (v, t) in zip(sources, targets, parts)))

    most = max(v.numel() + (0 if t is None else 2 * t.numel()) for v, t in parts)  # 2-byte halves
    tk.convert_partials(arena, table(slots, wires), True, wire_dtype, most)
    # widen into fresh slots: each row's slot is the target, its wire the source
    tk.convert_partials(arena, table(back, wires), False, wire_dtype, most)
    for (v, t), wire, target in zip(parts, wires, back):
        narrowed = read(arena, wire, wire_dtype, v.numel())
        assert torch.equal(narrowed, v.to(wire_dtype)), "narrowed values"  # torch rounds RNE
        widened = read(arena, target, torch.float32, v.numel())
        assert torch.equal(widened, v.to(wire_dtype).float()), "widened values"
        if t is not None:
            at = wire + v.numel() * width  # maybe not 4-byte aligned: copy before viewing
            assert torch.equal(arena[at:at + 4 * t.numel()].clone().view(torch.float32), t)
            assert torch.equal(read(arena, target + 4 * v.numel(), torch.float32, t.numel()), t)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        tk.convert_partials(arena, table(slots, wires), True, torch.float32, most)


@interpreted
def test_merge_and_add():
    g = torch.Generator().manual_seed(3)
    tokens, heads, head_dim = 19, 3, 40
    o_a, o_b = randn(g, tokens, heads, head_dim), randn(g, tokens, heads, head_dim)
    lse_a, lse_b = randn(g, heads, tokens), randn(g, heads, tokens)
    lse_a[0, :3] = -math.inf  # only src has keys
    lse_b[1, :3] = -math.inf  # only dst has keys
    lse_a[2, :3] = lse_b[2, :3] = -math.inf  # neither
    o_a[0, 0] = o_b[0, 2] = o_a[1, 2] = 0.0  # rows without keys hold o = 0
    layout = Arena()
    dst, src = layout.place(o_a, lse_a), layout.place(o_b, lse_b)
    x, y = randn(g, 1000), randn(g, 1000)
    sum_dst, sum_src = layout.place(x), layout.place(y)
    arena = layout.build()
    tk.merge_rows(arena, memory_rows((dst, src, tokens)), heads, head_dim, tokens)
    tk.add_rows(arena, memory_rows((sum_dst, sum_src, 1000)), 1000)
    lse = torch.logaddexp(lse_a.double(), lse_b.double())
    w_a = torch.exp(lse_a.double() - lse).nan_to_num(0.0).T[..., None]
    w_b = torch.exp(lse_b.double() - lse).nan_to_num(0.0).T[..., None]
    assert_close(read(arena, dst + o_a.numel() * 4, torch.float32, heads, tokens), lse,
                 torch.float32, "lse")
    assert_close(read(arena, dst, torch.float32, tokens, heads, head_dim), w_a * o_a + w_b * o_b,
                 torch.float32, "o")
    assert torch.equal(read(arena, sum_dst, torch.float32, 1000), x + y)


@interpreted
def test_memory_tables_run_many_merges_and_sums_in_one_launch():
    """Rows of a memory table, one launch per kind: two merges of different token counts and two
    sums."""
    g = torch.Generator().manual_seed(4)
    heads, head_dim = 2, 24
    layout = Arena()
    merges = []
    for tokens in (5, 11):
        parts = [(randn(g, tokens, heads, head_dim), randn(g, heads, tokens)) for _ in range(2)]
        merges.append((tokens, parts, [layout.place(o, lse) for o, lse in parts]))
    sums = [(randn(g, n), randn(g, n)) for n in (300, 77)]
    sum_offs = [(layout.place(x), layout.place(y)) for x, y in sums]
    arena = layout.build()

    tk.merge_rows(arena, memory_rows(*((offs[0], offs[1], t) for t, _, offs in merges)), heads,
                  head_dim, 11)
    sum_rows = ((d, s_, x.numel()) for (d, s_), (x, _) in zip(sum_offs, sums))
    tk.add_rows(arena, memory_rows(*sum_rows), 300)
    for tokens, ((o_a, lse_a), (o_b, lse_b)), offs in merges:
        lse = torch.logaddexp(lse_a.double(), lse_b.double())
        w_a = torch.exp(lse_a.double() - lse).T[..., None]
        w_b = torch.exp(lse_b.double() - lse).T[..., None]
        assert_close(read(arena, offs[0], torch.float32, tokens, heads, head_dim),
                     w_a * o_a + w_b * o_b, torch.float32, f"o of {tokens} tokens")
        assert_close(read(arena, offs[0] + o_a.numel() * 4, torch.float32, heads, tokens), lse,
                     torch.float32, f"lse of {tokens} tokens")
    for (d, _), (x, y) in zip(sum_offs, sums):
        assert torch.equal(read(arena, d, torch.float32, x.numel()), x + y)
    width = len(tk.TABLES["memory_rows"])
    with pytest.raises(ValueError, match=rf"int64 \[n, {width}\]"):
        tk.add_rows(arena, torch.zeros(1, width + 1, dtype=torch.int64), 1)


# --- attention --------------------------------------------------------------------------------

class Problem:
    """q values, kv values and entries (q index, kv index, mask rows or None) of one pass."""

    def __init__(self, seed, dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens, masks):
        g = torch.Generator().manual_seed(seed)
        self.dtype, self.head_dim, self.heads, self.kv_heads = dtype, head_dim, heads, kv_heads
        self.scale = head_dim ** -0.5
        self.q = [randn(g, t, heads, head_dim, dtype=dtype) for t in q_tokens]
        self.do = [randn(g, t, heads, head_dim, dtype=dtype) for t in q_tokens]
        self.kv = [(randn(g, t, kv_heads, head_dim, dtype=dtype),
                    randn(g, t, kv_heads, head_dim, dtype=dtype)) for t in kv_tokens]
        self.entries = []
        kinds = iter(masks * (len(q_tokens) * len(kv_tokens)))
        for i, qt in enumerate(q_tokens):
            for j, kt in enumerate(kv_tokens):
                kind = next(kinds)
                rows = {"full": None, "causal": causal_rows(qt, kt),
                        "random": random_rows(qt, kt, g), "bands": band_rows(qt, kt, 16),
                        "bands64": band_rows(qt, kt, 64)}[kind]
                self.entries.append((i, j, rows))

    def entries_of_q(self, i):
        return [e for e, entry in enumerate(self.entries) if entry[0] == i]

    def entries_of_kv(self, j):
        return [e for e, entry in enumerate(self.entries) if entry[1] == j]

    def part(self, e):
        i, j, rows = self.entries[e]
        k, v = self.kv[j]
        return k, v, dense(rows, self.q[i].shape[0], k.shape[0])

    def forward(self, i, members):
        return reference_forward(self.q[i], [self.part(e) for e in members], self.scale)

    def kwargs(self):
        return dict(heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim,
                    dtype=self.dtype, scale=self.scale)

    def out_shape(self, tokens):
        return (tokens, self.heads, self.head_dim)


def place_forward_inputs(problem, layout, tables):
    q_offs = [layout.place(q) for q in problem.q]
    kv_offs = [layout.place(k, v) for k, v in problem.kv]
    for i, j, rows in problem.entries:
        tables.entry(q_offs[i], kv_offs[j], problem.q[i].shape[0], problem.kv[j][0].shape[0],
                     rows)


def read_out(arena, offset, problem, tokens):
    o = read(arena, offset, torch.float32, *problem.out_shape(tokens))
    lse = read(arena, offset + o.numel() * 4, torch.float32, problem.heads, tokens)
    return o, lse


FORWARD_CASES = [  # dtype, head dim, heads, kv heads, q tokens, kv tokens, masks (cycled)
    (torch.float32, 64, 4, 2, (37, 16), (45, 20), ["random", "full", "causal"]),
    (torch.bfloat16, 128, 4, 1, (1, 19), (1, 33), ["full", "random", "causal", "random"]),
    (torch.float16, 64, 2, 2, (40,), (17, 24), ["causal", "random"]),
    (torch.float32, 40, 2, 1, (18,), (21,), ["random"]),
    (torch.float32, 128, 2, 1, (20,), (19,), ["causal", "random"]),  # the "wide" tiles
    (torch.float32, 64, 4, 1, (96,), (40, 24), ["bands", "causal"]),  # runs of whole sub-blocks
]
if _ON_CUDA:  # values of several sub-blocks of every GPU tile (too slow for the interpreter)
    FORWARD_CASES += [
        (torch.bfloat16, 128, 4, 2, (300, 129), (260, 70), ["random", "causal", "full", "random"]),
        (torch.float16, 64, 2, 1, (257,), (190, 66), ["causal", "random"]),
        (torch.float32, 128, 2, 1, (150,), (170,), ["random", "causal"]),
        (torch.bfloat16, 128, 4, 1, (384,), (160, 96), ["bands64", "causal"]),  # GPU sub-blocks
    ]


@interpreted
@pytest.mark.parametrize("case", FORWARD_CASES, ids=lambda c: f"{c[0]}-d{c[1]}-{c[2]}/{c[3]}")
def test_attention_forward(case):
    dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens, masks = case
    problem = Problem(4, dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens, masks)
    layout, tables = Arena(), Tables()
    place_forward_inputs(problem, layout, tables)
    outs = [layout.reserve(4 * t * heads * (head_dim + 1)) for t in q_tokens]
    empty_out = layout.reserve(4 * q_tokens[0] * heads * (head_dim + 1))
    group_rows = [(outs[i], t, False, problem.entries_of_q(i)) for i, t in enumerate(q_tokens)]
    groups = tables.groups(group_rows + [(empty_out, q_tokens[0], False, [])])
    arena = layout.build()
    tk.attention_forward(arena, groups=groups, **tables.tensors(), **problem.kwargs(),
                         max_tokens=max(q_tokens))
    for i, t in enumerate(q_tokens):
        o, lse = read_out(arena, outs[i], problem, t)
        ref_o, ref_lse = problem.forward(i, problem.entries_of_q(i))
        assert_close(lse, ref_lse, dtype, f"lse of q {i}")
        assert_close(o, ref_o, dtype, f"o of q {i}")
    o, lse = read_out(arena, empty_out, problem, q_tokens[0])
    assert torch.equal(o, torch.zeros_like(o)) and (lse == -math.inf).all()


@interpreted
def test_attention_forward_accumulate_and_merge():
    """A row's kv entries split over two instructions (the second merging into the first's
    output), or into two partials merged by merge(), equal one call over all of them."""
    problem = Problem(5, torch.float32, 64, 2, 1, (30,), (25, 20, 18),
                      ["random", "causal", "full"])
    e_a, e_b, e_c = problem.entries_of_q(0)
    layout, tables = Arena(), Tables()
    place_forward_inputs(problem, layout, tables)
    size = 4 * 30 * 2 * 65
    split, left, right, untouched = (layout.reserve(size) for _ in range(4))
    held = (randn(torch.Generator().manual_seed(6), *problem.out_shape(30)), torch.zeros(2, 30))
    held[1][0, :5] = -math.inf
    held[0][:5, 0] = 0.0
    untouched = layout.place(*held)
    first = tables.groups([(split, 30, False, [e_a]), (left, 30, False, [e_b]),
                           (right, 30, False, [e_a, e_c])])
    second = tables.groups([(split, 30, True, [e_b, e_c]), (untouched, 30, True, [])])
    arena = layout.build()
    kwargs = dict(**tables.tensors(), **problem.kwargs(), max_tokens=30)
    tk.attention_forward(arena, groups=first, **kwargs)
    tk.attention_forward(arena, groups=second, **kwargs)
    tk.merge_rows(arena, memory_rows((left, right, 30)), 2, 64, 30)
    ref_o, ref_lse = problem.forward(0, [e_a, e_b, e_c])
    for offset in (split, left):
        o, lse = read_out(arena, offset, problem, 30)
        assert_close(lse, ref_lse, torch.float32, "lse")
        assert_close(o, ref_o, torch.float32, "o")
    o, lse = read_out(arena, untouched, problem, 30)
    assert torch.equal(o, held[0]) and torch.equal(lse, held[1])


def place_backward_inputs(problem, layout, tables):
    """kQGrad values with lse and delta of each q's full forward over all its entries."""
    q_offs = []
    for i, (q, do) in enumerate(zip(problem.q, problem.do)):
        o, lse = problem.forward(i, problem.entries_of_q(i))
        delta = (o * do.double()).sum(-1).T
        q_offs.append(layout.place(q, do, lse.float(), delta.float()))
    kv_offs = [layout.place(k, v) for k, v in problem.kv]
    for i, j, rows in problem.entries:
        tables.entry(q_offs[i], kv_offs[j], problem.q[i].shape[0], problem.kv[j][0].shape[0],
                     rows)


def reference_gradients(problem, entries, stats=torch.float32):
    """dq per q value and dk, dv per kv value, summed over `entries`, from lse and delta rounded
    to `stats` (the kernels read fp32)."""
    dq = [torch.zeros(q.shape, dtype=torch.float64) for q in problem.q]
    dk = [torch.zeros(k.shape, dtype=torch.float64) for k, _ in problem.kv]
    dv = [torch.zeros(k.shape, dtype=torch.float64) for k, _ in problem.kv]
    for e in entries:
        i, j, _ = problem.entries[e]
        o, lse = problem.forward(i, problem.entries_of_q(i))
        delta = (o * problem.do[i].double()).sum(-1).T
        grads = reference_backward(problem.q[i], problem.do[i], lse.to(stats), delta.to(stats),
                                   *problem.part(e), problem.scale)
        dq[i] += grads[0]
        dk[j] += grads[1]
        dv[j] += grads[2]
    return dq, dk, dv


def test_reference_backward_matches_autograd():
    """The per-entry gradient formulas summed over a row's entries are autograd's gradients."""
    problem = Problem(7, torch.float64, 16, 4, 2, (9,), (7, 5), ["random", "causal"])
    q = problem.q[0].clone().requires_grad_()
    kv = [(k.clone().requires_grad_(), v.clone().requires_grad_()) for k, v in problem.kv]
    parts = [(k, v, problem.part(e)[2]) for e, (k, v) in enumerate(kv)]
    o, _ = reference_forward(q, parts, problem.scale)
    (o * problem.do[0]).sum().backward()
    dq, dk, dv = reference_gradients(problem, [0, 1], stats=torch.float64)
    assert torch.allclose(q.grad, dq[0])
    for j, (k, v) in enumerate(kv):
        assert torch.allclose(k.grad, dk[j]) and torch.allclose(v.grad, dv[j])


@interpreted
@pytest.mark.parametrize("case", FORWARD_CASES, ids=lambda c: f"{c[0]}-d{c[1]}-{c[2]}/{c[3]}")
def test_attention_backward(case):
    dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens, masks = case
    problem = Problem(8, dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens, masks)
    layout, tables = Arena(), Tables()
    place_backward_inputs(problem, layout, tables)
    dq_offs = [layout.reserve(4 * t * heads * head_dim) for t in q_tokens]
    dkv_offs = [layout.reserve(8 * t * kv_heads * head_dim) for t in kv_tokens]
    empty_dq = layout.reserve(4 * q_tokens[0] * heads * head_dim)
    empty_dkv = layout.reserve(8 * kv_tokens[0] * kv_heads * head_dim)
    q_groups = tables.groups([(dq_offs[i], t, False, problem.entries_of_q(i))
                              for i, t in enumerate(q_tokens)] +
                             [(empty_dq, q_tokens[0], False, [])])
    kv_groups = tables.groups([(dkv_offs[j], t, False, problem.entries_of_kv(j))
                               for j, t in enumerate(kv_tokens)] +
                              [(empty_dkv, kv_tokens[0], False, [])], "kv_groups")
    arena = layout.build()
    tk.attention_backward(arena, q_groups=q_groups, kv_groups=kv_groups, **tables.tensors(),
                          **problem.kwargs(), max_q_tokens=max(q_tokens),
                          max_kv_tokens=max(kv_tokens))
    dq, dk, dv = reference_gradients(problem, range(len(problem.entries)))
    for i, t in enumerate(q_tokens):
        assert_close(read(arena, dq_offs[i], torch.float32, t, heads, head_dim), dq[i], dtype,
                     f"dq of q {i}")
    for j, t in enumerate(kv_tokens):
        grads = read(arena, dkv_offs[j], torch.float32, 2, t, kv_heads, head_dim)
        assert_close(grads[0], dk[j], dtype, f"dk of kv {j}")
        assert_close(grads[1], dv[j], dtype, f"dv of kv {j}")
    assert (read(arena, empty_dq, torch.float32, q_tokens[0] * heads * head_dim) == 0).all()
    empty = read(arena, empty_dkv, torch.float32, 2 * kv_tokens[0] * kv_heads * head_dim)
    assert (empty == 0).all()


def move_kv_to_kept(arena, entries, problem):
    """Moves every other distinct kv value the entries read into a kept tensor (at multiples of
    the slot alignment, as the lowering places kept values) and marks its entries' kv_buffer
    kept; its bytes in the arena become 0xFF (NaN), so a kernel that reads the slot instead shows
    up."""
    column = tk.TABLES["entries"]
    align = tk.SLOT_ALIGNMENT
    entries = entries.clone()
    slots = entries[:, column["kv_off"]].clone()
    element = torch.empty((), dtype=problem.dtype).element_size()
    moved, size = {}, 0
    for off in sorted(set(slots.tolist()))[::2]:
        tokens = int(entries[slots == off][0, column["kv_tokens"]])
        nbytes = 2 * tokens * problem.kv_heads * problem.head_dim * element
        moved[off] = (size, nbytes)
        size += -(-nbytes // align) * align
    kept = torch.full((size + align,), 0xFF, dtype=torch.uint8)
    for off, (place, nbytes) in moved.items():
        kept[place:place + nbytes] = arena[off:off + nbytes]
        arena[off:off + nbytes] = 0xFF
        entries[slots == off, column["kv_off"]] = place
        entries[slots == off, column["kv_buffer"]] = tk.BUFFERS["kept"]
    assert 0 < len(moved) < len(set(slots.tolist()))
    return kept, entries


@interpreted
def test_attention_reads_kept_kv_values_in_the_kept_tensor():
    """Entries whose kv_buffer is the kept tensor read their kv value there (where the forward
    pass receives the values it keeps and the backward pass reads them), the others in the
    arena: o, lse, dq, dk and dv are those of the values."""
    dtype, head_dim, heads, kv_heads = torch.bfloat16, 64, 4, 2
    q_tokens, kv_tokens = (23, 17), (19, 30, 9)
    problem = Problem(11, dtype, head_dim, heads, kv_heads, q_tokens, kv_tokens,
                      ["random", "causal", "full"])
    layout, tables = Arena(), Tables()
    place_forward_inputs(problem, layout, tables)
    outs = [layout.reserve(4 * t * heads * (head_dim + 1)) for t in q_tokens]
    groups = tables.groups([(outs[i], t, False, problem.entries_of_q(i))
                            for i, t in enumerate(q_tokens)])
    arena = layout.build()
    t = tables.tensors()
    kept, t["entries"] = move_kv_to_kept(arena, t["entries"], problem)
    tk.attention_forward(arena, groups=groups, **t, **problem.kwargs(), max_tokens=max(q_tokens),
                         kept=kept)
    for i, tokens in enumerate(q_tokens):
        o, lse = read_out(arena, outs[i], problem, tokens)
        ref_o, ref_lse = problem.forward(i, problem.entries_of_q(i))
        assert_close(lse, ref_lse, dtype, f"lse of q {i}")
        assert_close(o, ref_o, dtype, f"o of q {i}")

    layout, tables = Arena(), Tables()
    place_backward_inputs(problem, layout, tables)
    dq_offs = [layout.reserve(4 * t * heads * head_dim) for t in q_tokens]
    dkv_offs = [layout.reserve(8 * t * kv_heads * head_dim) for t in kv_tokens]
    q_groups = tables.groups([(dq_offs[i], t, False, problem.entries_of_q(i))
                              for i, t in enumerate(q_tokens)])
    kv_groups = tables.groups([(dkv_offs[j], t, False, problem.entries_of_kv(j))
                               for j, t in enumerate(kv_tokens)], "kv_groups")
    arena = layout.build()
    t = tables.tensors()
    kept, t["entries"] = move_kv_to_kept(arena, t["entries"], problem)
    tk.attention_backward(arena, q_groups=q_groups, kv_groups=kv_groups, **t, **problem.kwargs(),
                          max_q_tokens=max(q_tokens), max_kv_tokens=max(kv_tokens), kept=kept)
    dq, dk, dv = reference_gradients(problem, range(len(problem.entries)))
    for i, tokens in enumerate(q_tokens):
        assert_close(read(arena, dq_offs[i], torch.float32, tokens, heads, head_dim), dq[i],
                     dtype, f"dq of q {i}")
    for j, tokens in enumerate(kv_tokens):
        grads = read(arena, dkv_offs[j], torch.float32, 2, tokens, kv_heads, head_dim)
        assert_close(grads[0], dk[j], dtype, f"dk of kv {j}")
        assert_close(grads[1], dv[j], dtype, f"dv of kv {j}")


@interpreted
def test_attention_backward_accumulate():
    """Gradients added to what the kDQ and kDKV slots hold equal held + the call's entries; a
    q's entries split over two instructions (the second accumulating) equal one call."""
    problem = Problem(9, torch.float32, 64, 4, 2, (21, 12), (26,), ["random", "causal"])
    layout, tables = Arena(), Tables()
    place_backward_inputs(problem, layout, tables)
    g = torch.Generator().manual_seed(10)
    held_dq, held_dkv = randn(g, 12, 4, 64), randn(g, 2, 26, 2, 64)
    dq_split = layout.reserve(4 * 21 * 4 * 64)
    dq_held = layout.place(held_dq)
    dkv_held = layout.place(held_dkv)
    e_first, e_second = problem.entries_of_q(0)[0], problem.entries_of_q(1)[0]
    first = (tables.groups([(dq_split, 21, False, [e_first])]),
             tables.groups([(dkv_held, 26, True, [e_first])], "kv_groups"))
    second = (tables.groups([(dq_split, 21, True, [e_first]), (dq_held, 12, True, [e_second])]),
              tables.groups([(dkv_held, 26, True, [e_second])], "kv_groups"))
    arena = layout.build()
    kwargs = dict(**tables.tensors(), **problem.kwargs(), max_q_tokens=21, max_kv_tokens=26)
    for q_groups, kv_groups in (first, second):
        tk.attention_backward(arena, q_groups=q_groups, kv_groups=kv_groups, **kwargs)
    dq, dk, dv = reference_gradients(problem, [e_first, e_second])
    assert_close(read(arena, dq_split, torch.float32, 21, 4, 64), 2 * dq[0], torch.float32, "dq")
    assert_close(read(arena, dq_held, torch.float32, 12, 4, 64), held_dq.double() + dq[1],
                 torch.float32, "held dq")
    grads = read(arena, dkv_held, torch.float32, 2, 26, 2, 64)
    assert_close(grads[0], held_dkv[0].double() + dk[0], torch.float32, "dk")
    assert_close(grads[1], held_dkv[1].double() + dv[0], torch.float32, "dv")


@interpreted
def test_load_attend_store_matches_sdpa():
    """Loads, forward, stores, then the backward's loads, kernels and stores of one q block
    against two kv blocks (a causal sequence) equal torch's SDPA and autograd in fp64."""
    g = torch.Generator().manual_seed(11)
    T, H, HK, D, begin, split = 40, 4, 2, 64, 8, 20
    q, do = randn(g, T, H, D), randn(g, T, H, D)
    k, v = randn(g, T, HK, D), randn(g, T, HK, D)
    scale = 0.125
    rows = T - begin
    layout, tables = Arena(), Tables()
    q_off = layout.reserve(rows * H * D * 4)
    grad_off = layout.reserve(rows * H * (2 * D + 2) * 4)
    kv_offs = [layout.reserve(2 * split * HK * D * 4) for _ in range(2)]
    out_off = layout.reserve(rows * H * (D + 1) * 4)
    dq_off = layout.reserve(rows * H * D * 4)
    dkv_offs = [layout.reserve(2 * split * HK * D * 4) for _ in range(2)]
    forward, backward = [], []
    for j in range(2):
        causal = [[(0, min(split, begin + r + 1 - j * split))]
                  if begin + r + 1 > j * split else [] for r in range(rows)]
        forward.append(tables.entry(q_off, kv_offs[j], rows, split, causal))
        backward.append(tables.entry(grad_off, kv_offs[j], rows, split, causal))
    groups = tables.groups([(out_off, rows, False, forward)])
    q_groups = tables.groups([(dq_off, rows, False, backward)])
    kv_groups = tables.groups([(dkv_offs[j], split, False, [backward[j]]) for j in range(2)],
                              "kv_groups")
    arena = layout.build()
    t = tables.tensors()
    shape = dict(heads=H, kv_heads=HK, head_dim=D, dtype=torch.float32, scale=scale)

    o, lse = torch.zeros(T, H, D), torch.zeros(H, T)
    tk.load_q_copies(arena, copy_rows((q_off, begin, rows, 0)), q, H, rows)
    tk.load_kv_copies(arena, copy_rows(*((kv_offs[j], j * split, split, 0) for j in range(2))), k,
                      v, HK, split)
    tk.attention_forward(arena, groups=groups, **t, **shape, max_tokens=rows)
    tk.store_q_copies(arena, copy_rows((out_off, begin, rows, 0)), o, H, rows, lse=lse)

    dq, dk, dv = torch.zeros(T, H, D), torch.zeros(T, HK, D), torch.zeros(T, HK, D)
    tk.load_qgrad_copies(arena, copy_rows((grad_off, begin, rows, 0)), q, do, o, lse, H, rows)
    tk.attention_backward(arena, q_groups=q_groups, kv_groups=kv_groups, **t, **shape,
                          max_q_tokens=rows, max_kv_tokens=split)
    tk.store_q_copies(arena, copy_rows((dq_off, begin, rows, 0)), dq, H, rows)
    tk.store_kv_copies(arena, copy_rows(*((dkv_offs[j], j * split, split, 0) for j in range(2))),
                       dk, dv, HK, split)

    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    qd, kd, vd = (x.transpose(0, 1) for x in leaves)  # [heads][tokens][d]
    mask = torch.ones(T, T, dtype=torch.bool).tril()[begin:]
    ref = torch.nn.functional.scaled_dot_product_attention(
        qd[:, begin:], kd, vd, attn_mask=mask, scale=scale, enable_gqa=True)
    (ref * do.double().transpose(0, 1)[:, begin:]).sum().backward()
    scores = torch.einsum("htd,khd->htk", qd[:, begin:], expand_kv(leaves[1], H)) * scale
    ref_lse = torch.logsumexp(scores.masked_fill(~mask, -math.inf), dim=-1)
    assert_close(o[begin:], ref.transpose(0, 1).detach(), torch.float32, "o")
    assert_close(lse[:, begin:], ref_lse.detach(), torch.float32, "lse")
    assert_close(dq, leaves[0].grad, torch.float32, "dq")
    assert_close(dk, leaves[1].grad, torch.float32, "dk")
    assert_close(dv, leaves[2].grad, torch.float32, "dv")
