"""gpt_shapes.py — the parameter shapes of train_offload.py's 152M GPT (12 layers, d = 1024,
byte vocabulary, 512-token block) in its parameters' order, for the benchmarks that move its
optimizer states without the model (optim_step.py, device_put.py)."""
D, LAYERS, VOCAB, BLOCK = 1024, 12, 256, 512
SHAPES = [(VOCAB, D), (BLOCK, D)]
for _ in range(LAYERS):
    SHAPES += [(D,), (D,), (3 * D, D), (3 * D,), (D, D), (D,), (D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
SHAPES += [(D,), (D,)]
