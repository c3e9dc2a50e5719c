"""torchrun_worker.py — one rank of a DDP or FSDP trainer (gloo) whose AdamW states live in its own lctd, chosen from $LCT_ENDPOINTS by local rank.

    torchrun --standalone --nproc_per_node 2 [--max_restarts 1] torchrun_worker.py OUT_DIR \\
        --device cpu|cuda --optimizer adamw|offload|fused|compressed [--parallel ddp|fsdp] [--steps N]
        [--fail-after K]

Each rank trains the same small model on its own batches for --steps steps and
appends "attempt step loss" lines (the loss as float.hex) to OUT_DIR/rankR.txt,
then writes the SHA-256 of its final parameters to OUT_DIR/rankR.params.
--parallel fsdp shards every layer and the model with FSDP2's fully_shard
(each rank holds, updates and keeps states for half of each parameter);
the digests are then of the rank's shards.
--optimizer adamw: torch.optim.AdamW(foreach=False), states in the trainer.
--optimizer fused: torch.optim.AdamW(fused=True) (CUDA).
--optimizer compressed: lct.torch.CompressedAdamW, states compressed on the rank's GPU (CUDA).
--optimizer offload: lct.optim.OffloadedAdamW with the lctd of
lct.Client.for_rank() (keys under $LCT_RUN/rankR/); after each step the rank
flushes its states and puts its parameters and the step it finished
($LCT_RUN/rankR/committed, last) in that lctd. A rank started again (torchrun's
restart) that finds committed there takes its parameters back and resumes the
optimizer at that step, without a checkpoint file. --fail-after K: in the first
attempt, rank 1 exits once every rank has committed step K, for torchrun to
restart the group.
"""
import argparse
import datetime
import faulthandler
import hashlib
import importlib
import os
import pathlib
import struct
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # client/python: the source tree

import lct  # noqa: E402
import lct.optim  # noqa: E402
from lct._shard import local  # noqa: E402

HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)


def make_model(device):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 24), torch.nn.Linear(24, 40), torch.nn.GELU(),
                                torch.nn.LayerNorm(40), torch.nn.Linear(40, 7))
    return model.to(device)


def batch(step, rank, device):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randint(0, 50, (16, 5), generator=g)
    y = torch.randint(0, 7, (16 * 5,), generator=g)
    return x.to(device), y.to(device)


def commit(client, prefix, model, opt, step):
    """The rank's state after `step` steps, in its lctd: the optimizer's (flushed), the parameters, then the marker."""
    opt.flush()
    for name, p in model.named_parameters():
        client.put(f"{prefix}model/{name}", local(p.detach()))
    client.put(f"{prefix}committed", struct.pack("<q", step))


def restore(client, prefix, model, opt):
    """The step a previous attempt of this rank committed, with its parameters and states taken back; 0 if none."""
    try:
        step, = struct.unpack("<q", bytes(client.get(f"{prefix}committed")))
    except lct.NotFoundError:
        return 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            client.get(f"{prefix}model/{name}", out=local(p.data))
    opt.resume(step)
    return step


def init_group(rank, attempt):
    """The gloo group of this attempt, its rendezvous keys under the attempt's number: after an elastic restart
    the store still holds the last attempt's addresses, and a rank that reads one before its peer has replaced it
    connects to a process that is gone (pytorch/pytorch#167288)."""
    world = int(os.environ["WORLD_SIZE"])
    host = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"  # else torchrun's agent hosts it
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=host,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{attempt}/", store), rank=rank, world_size=world)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--optimizer", choices=("adamw", "offload", "fused", "compressed"), required=True)
    ap.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--fail-after", type=int, default=0)
    args = ap.parse_args()
    faulthandler.dump_traceback_later(100, exit=True)  # a rank that hangs shows where, and ends its group
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    init_group(rank, attempt)
    # Two ranks on one GPU: both on device 0.
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    model = make_model(device)
    if args.parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard  # torch 2.6 or later
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(args.device, (dist.get_world_size(),))
        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh)
        net = fully_shard(model, mesh=mesh)
    else:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if args.device == "cuda" else None)
    client = prefix = None
    if args.optimizer == "offload":
        client = lct.Client.for_rank(local_rank, timeout_ms=60000)
        prefix = f"{os.environ['LCT_RUN']}/rank{rank}/"
        opt = lct.optim.OffloadedAdamW(net.parameters(), client, key_prefix=prefix + "adam/", **HYPER)
        first = restore(client, prefix, model, opt)
    elif args.optimizer == "compressed":
        lct_torch = importlib.import_module("lct.torch")  # needs CUDA: loaded only for this mode
        opt = lct_torch.CompressedAdamW(net.parameters(), min_bytes=1, **HYPER)  # every state compressed
        first = 0
    else:
        opt = torch.optim.AdamW(net.parameters(), foreach=False, fused=args.optimizer == "fused", **HYPER)
        first = 0
    with open(args.out / f"rank{rank}.txt", "a") as log:
        for step in range(first, args.steps):
            opt.zero_grad()
            x, y = batch(step, rank, device)
            loss = torch.nn.functional.cross_entropy(net(x).float().reshape(-1, 7), y)
            loss.backward()
            opt.step()
            log.write(f"{attempt} {step} {loss.item().hex()}\n")
            log.flush()
            if client is not None:
                commit(client, prefix, model, opt, step + 1)
            if attempt == 0 and step + 1 == args.fail_after:
                dist.barrier()  # every rank has committed this step
                if rank == 1:
                    sys.exit(1)
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(bytes(local(p.detach()).cpu().contiguous().view(torch.uint8).reshape(-1).tolist()))
    (args.out / f"rank{rank}.params").write_text(digest.hexdigest() + "\n")
    if client is not None:
        client.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
