#!/usr/bin/env python3
"""Train a zbsched plan in PyTorch's own pipeline runtime.

    zbsched export plan.json --format pytorch -o job.json     # job.json + job.csv
    zbsched checkpoint init plan.json -o ck0                  # the run's step-0 state
    zbsched checkpoint export ck0 -o hf0                      # as Hugging Face weights
    python3 examples/pytorch/train_plan.py job.json --weights hf0 --steps 10

The sidecar (job.json) says what the CSV cannot: the model, the layers of
every virtual stage, which stages recompute and how, the micro-batch and
the widths.  Every rank builds the Llama stages the CSV gives it, with the
architecture of zbsched's CPU kernels (kernels/cpu/llama.h: RMSNorm with
eps 1e-5, RoPE, grouped KV heads, SwiGLU, untied head, no bias), loads
their weights from the Hugging Face safetensors that `zbsched checkpoint
export` wrote, wraps the layers of recomputing stages in checkpoint_wrapper
(the whole layer for "full", the MLP block for "mlp", as zbsched's levels
do), and runs the exported CSV with _PipelineScheduleRuntime over gloo, one
CPU process per pipeline rank.  The optimizer is zbsched's: AdamW (betas
0.9/0.99, eps 1e-8, weight decay 0.1 on matrices), global-norm clip 1.0
over all ranks, nanoGPT's warmup and cosine (warmup min(100, steps/10),
floor lr/10 at --steps).

The data are zbsched's own: the same character vocabulary (the sorted
bytes of the text), the same 90/10 split and the same training windows in
the same order, drawn with a copy of zbsched's seeded sampler
(runtime/rng.c: xoshiro256** seeded through splitmix64; runtime/data.c:
one uniform window start per sequence, micro-batch after micro-batch).  So
the losses printed are comparable with `zbsched run plan.json --seed S`
step by step (docs/pytorch.md says within what).

The weights are in transformers' layout (rotate_half RoPE, q and k rows
reordered by the exporter), so the model applies rotate_half; it is the
same function as zbsched's interleaved RoPE on zbsched's own weights.

Prints one JSON object on stdout: {"losses": [...], "torch": version, ...}.
Needs PyTorch (CPU is enough).  zbsched itself never needs it.
"""
import argparse
import json
import math
import os
import socket
import struct
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

MASK64 = (1 << 64) - 1


# ---- zbsched's sampler (runtime/rng.c, runtime/data.c) -------------------

def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


class ZbRng:
    """xoshiro256** seeded as rng_seed(seed, stream) seeds it."""

    def __init__(self, seed, stream):
        y = stream ^ 0x6A09E667F3BCC909
        _, mix = _splitmix64(y)
        x = (seed ^ mix) & MASK64
        self.s = []
        for _ in range(4):
            x, v = _splitmix64(x)
            self.s.append(v)

    def next(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def below(self, n):
        limit = MASK64 - MASK64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n


class ZbData:
    """The training windows `zbsched run` draws (trainer seed stream 0x5eed0000)."""

    def __init__(self, path, ctx, seed):
        text = open(path, "rb").read()
        self.chars = sorted(set(text))
        ids = {c: i for i, c in enumerate(self.chars)}
        self.tokens = torch.tensor([ids[c] for c in text], dtype=torch.int64)
        self.n_train = len(text) - len(text) // 10
        self.ctx = ctx
        self.rng = ZbRng(seed, 0x5EED0000)

    def batch(self, n):
        """n windows: inputs [n, ctx] and targets [n, ctx]."""
        windows = self.n_train - self.ctx
        starts = [self.rng.below(windows) for _ in range(n)]
        x = torch.stack([self.tokens[s:s + self.ctx] for s in starts])
        y = torch.stack([self.tokens[s + 1:s + 1 + self.ctx] for s in starts])
        return x, y


# ---- the model: zbsched's Llama in transformers' names -------------------

def read_safetensors(path):
    """name -> float32 tensor, for F32 and BF16 files (what zbsched writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = bytearray(data[b:e])
        if t["dtype"] == "F32":
            v = torch.frombuffer(raw, dtype=torch.float32)
        elif t["dtype"] == "BF16":
            v = torch.frombuffer(raw, dtype=torch.bfloat16).float()
        else:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']} (F32 or BF16 expected)")
        out[name] = v.reshape(t["shape"]).clone()
    return out


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(seq_len, hd, theta):
    """cos and sin [T, hd] as zbsched computes them: the angle in double, then fp32."""
    i = torch.arange(hd // 2, dtype=torch.float64)
    freq = theta ** (-2.0 * i / hd)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * freq[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().float(), ang.sin().float()


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, self.nh, self.nkv = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
        self.hd = d // self.nh
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv  # query head h reads KV head h / rep
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, self.nh * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    """The MLP block with its norm: what zbsched's "mlp" recompute level reruns."""

    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["d_model"], cfg["d_ff"]
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, h):
        n = self.post_attention_layernorm(h)
        return self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["d_model"])
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.register_buffer("cos", None, persistent=False)
        self.register_buffer("sin", None, persistent=False)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x), self.cos, self.sin)
        return h + self.mlp(h)

    def hf_names(self, prefix):
        """(module attribute path, transformers name) of every weight."""
        return [
            ("input_layernorm.weight", prefix + "input_layernorm.weight"),
            ("self_attn.q_proj.weight", prefix + "self_attn.q_proj.weight"),
            ("self_attn.k_proj.weight", prefix + "self_attn.k_proj.weight"),
            ("self_attn.v_proj.weight", prefix + "self_attn.v_proj.weight"),
            ("self_attn.o_proj.weight", prefix + "self_attn.o_proj.weight"),
            ("mlp.post_attention_layernorm.weight", prefix + "post_attention_layernorm.weight"),
            ("mlp.gate_proj.weight", prefix + "mlp.gate_proj.weight"),
            ("mlp.up_proj.weight", prefix + "mlp.up_proj.weight"),
            ("mlp.down_proj.weight", prefix + "mlp.down_proj.weight"),
        ]


class Stage(nn.Module):
    """Virtual stage s of the plan: its layers, the embedding on stage 0,
    the final norm and head on the last."""

    def __init__(self, cfg, first_layer, n_layers, first, last, recompute):
        super().__init__()
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        self.first, self.last = first, last
        self.ids = list(range(first_layer, first_layer + n_layers))
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["d_model"]) if first else None
        self.layers = nn.ModuleList(Layer(cfg) for _ in self.ids)
        cos, sin = rope_tables(cfg["seq_len"], cfg["d_model"] // cfg["n_heads"], cfg["rope_theta"])
        for layer in self.layers:
            layer.cos, layer.sin = cos, sin
            if recompute == "mlp":
                layer.mlp = checkpoint_wrapper(layer.mlp)
        if recompute == "full":
            self.layers = nn.ModuleList(checkpoint_wrapper(layer) for layer in self.layers)
        self.norm = RMSNorm(cfg["d_model"]) if last else None
        self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab"], bias=False) if last else None

    def forward(self, x):
        if self.first:
            x = self.embed_tokens(x)
        for layer in self.layers:
            x = layer(x)
        if self.last:
            x = self.lm_head(self.norm(x))
        return x

    def load(self, weights):
        """Copies this stage's tensors from transformers' names."""
        pairs = []
        if self.first:
            pairs.append((self.embed_tokens.weight, "model.embed_tokens.weight"))
        for layer, gid in zip(self.layers, self.ids):
            inner = getattr(layer, "_checkpoint_wrapped_module", layer)
            for path, name in inner.hf_names(f"model.layers.{gid}."):
                mod = inner
                for part in path.split(".")[:-1]:
                    mod = getattr(mod, part)
                    mod = getattr(mod, "_checkpoint_wrapped_module", mod)
                pairs.append((getattr(mod, path.split(".")[-1]), name))
        if self.last:
            pairs += [(self.norm.weight, "model.norm.weight"), (self.lm_head.weight, "lm_head.weight")]
        with torch.no_grad():
            for p, name in pairs:
                if name not in weights:
                    raise SystemExit(f"the weights have no tensor {name}")
                if tuple(weights[name].shape) != tuple(p.shape):
                    raise SystemExit(f"tensor {name} is {tuple(weights[name].shape)}, the plan's "
                                     f"model needs {tuple(p.shape)}")
                p.copy_(weights[name])


# ---- zbsched's optimizer -------------------------------------------------

def zb_lr(step, steps, lr):
    """adamw_lr with run's settings: warmup min(100, steps/10), cosine to lr/10 at steps."""
    warmup, min_lr = min(100, steps // 10), lr / 10
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps:
        return min_lr
    span = steps - warmup
    ratio = (step - warmup) / span if span > 0 else 1.0
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def worker(rank, args, plan, port, out_path):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=plan["pipeline_parallel"])
    cfg, S, m, b = plan["model"], plan["stages"], plan["n_micro"], plan["micro_batch"]
    weights = read_safetensors(os.path.join(args.weights, "model.safetensors"))
    mine = [s for s in range(S) if plan["placement"][s] == rank]
    modules = {}
    for s in mine:
        st = Stage(cfg, plan["first_layer"][s], plan["layers_per_stage"][s], s == 0, s == S - 1,
                   plan["recompute"][s])
        st.load(weights)
        modules[s] = st
    del weights
    stages = [PipelineStage(modules[s], s, S, torch.device("cpu")) for s in mine]
    sched = _PipelineScheduleRuntime(stages, m, loss_fn=loss_fn, scale_grads=True)
    sched._load_csv(plan["csv_path"], format="compute_only")

    params = [p for s in mine for p in modules[s].parameters()]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.99), eps=1e-8, foreach=False)
    data = ZbData(args.data, cfg["seq_len"], args.seed)
    losses = []
    for step in range(args.steps):
        x, y = data.batch(m * b)  # micro-batch j is rows [j*b, (j+1)*b), as zbsched draws them
        mb_losses = []
        for p in params:
            p.grad = None
        if 0 in mine and S - 1 in mine:
            sched.step(x, target=y, losses=mb_losses)
        elif 0 in mine:
            sched.step(x)
        elif S - 1 in mine:
            sched.step(target=y, losses=mb_losses)
        else:
            sched.step()
        # the global norm over every rank's stages, then zbsched's clip
        sq = torch.zeros(1, dtype=torch.float64)
        for p in params:
            if p.grad is not None:
                sq += p.grad.double().pow(2).sum()
        dist.all_reduce(sq)
        norm = math.sqrt(sq.item())
        scale = min(1.0, args.clip / (norm + 1e-6)) if args.clip > 0 else 1.0
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        for g in opt.param_groups:
            g["lr"] = zb_lr(step, args.steps, args.lr)
        opt.step()
        loss = torch.zeros(1, dtype=torch.float64)
        if mb_losses:
            loss += sum(l.double().item() for l in mb_losses) / m
        dist.all_reduce(loss)
        losses.append(loss.item())
    # which layers run under checkpoint_wrapper, per stage: the plan's recompute as built
    wrapped = {}
    for s, st in modules.items():
        full = sum(hasattr(l, "_checkpoint_wrapped_module") for l in st.layers)
        mlp = sum(hasattr(getattr(l, "_checkpoint_wrapped_module", l).mlp,
                          "_checkpoint_wrapped_module") for l in st.layers)
        wrapped[s] = {"full": full, "mlp": mlp}
    every = [None] * plan["pipeline_parallel"]
    dist.all_gather_object(every, wrapped)
    if rank == 0:
        merged = {str(s): w for part in every for s, w in part.items()}
        with open(out_path, "w") as f:
            json.dump({"losses": losses, "grad_norm_last": norm,
                       "checkpointed_layers": [merged[str(s)] for s in range(S)]}, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_data():
    env = os.environ.get("ZBSCHED_DATA")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "..", "shared", "data", "tinyshakespeare.txt")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="sidecar JSON from `zbsched export --format pytorch`")
    ap.add_argument("--weights", required=True,
                    help="Hugging Face directory from `zbsched checkpoint export`")
    ap.add_argument("--data", default=default_data(), help="training text (default as zbsched run)")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps (default 10)")
    ap.add_argument("--seed", type=int, default=1, help="data seed, as zbsched run --seed (default 1)")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    ap.add_argument("--clip", type=float, default=1.0, help="global-norm clip (default 1.0)")
    args = ap.parse_args()
    plan = json.load(open(args.plan))
    if plan.get("format") != "zbsched-pytorch-plan":
        raise SystemExit(f"{args.plan}: not a sidecar of `zbsched export --format pytorch`")
    if plan["data_parallel"] != 1:
        raise SystemExit(f"{args.plan}: the plan has {plan['data_parallel']} data-parallel "
                         "replicas; this example runs one pipeline (dp = 1)")
    plan["csv_path"] = os.path.join(os.path.dirname(os.path.abspath(args.plan)), plan["csv"])
    with open(os.path.join(args.weights, "config.json")) as f:
        hf = json.load(f)
    # the plan's vocabulary is the text's; the weights must agree
    plan["model"]["vocab"] = hf["vocab_size"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "losses.json")
        mp.spawn(worker, args=(args, plan, free_port(), out), nprocs=plan["pipeline_parallel"],
                 join=True)
        result = json.load(open(out))
    result.update({"torch": torch.__version__, "ranks": plan["pipeline_parallel"],
                   "stages": plan["stages"], "schedule": plan["schedule"]})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
