"""_shard.py — the part of a tensor this process holds: a DTensor's local shard (FSDP2, tensor parallelism), any
other tensor itself. Optimizers keep and move the states of that part only: they are what this rank updates."""


def local(t):
    """t's local shard when t is a DTensor (under no_grad the very tensor it holds, so in-place updates reach t),
    else t."""
    to_local = getattr(t, "to_local", None)  # duck-typed: torch.distributed.tensor need not be importable
    return t if to_local is None else to_local()
