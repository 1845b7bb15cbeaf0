"""PyTorch's plain loop: zero_grad, backward per micro-batch (loss / k), step; inference under
inference_mode. amp-bf16: the forward under torch.autocast in bfloat16 (no scaler: bfloat16
needs none); channels-last: the model and the batch moved to torch.channels_last (its 3D form
for volumes), as PyTorch's tuning guide and NVIDIA's recipes train convnets. On CUDA each
step ends with a synchronize, so the timer sees the work."""

from __future__ import annotations

import contextlib

import torch

from models.reference.common import only, parse, split, time_steps


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    only(args, ("fp32", "amp-bf16"), ("contiguous", "channels-last"), "PyTorch")
    m, k = args.module, args.accumulate
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = m.build(args.inputs).to(device)
    x, y = (torch.from_numpy(a).to(device) for a in m.synthetic_batch(args.batch, args.inputs, 0))
    if args.memory_format == "channels-last":
        layout = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        model, x = model.to(memory_format=layout), x.contiguous(memory_format=layout)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def autocast() -> contextlib.AbstractContextManager:
        if args.precision == "amp-bf16":
            return torch.autocast(device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    if args.mode == "infer":
        model.eval()

        def step() -> None:
            with torch.inference_mode(), autocast():
                model(x)
            sync()

    else:
        optimizer = m.make_optimizer(model.parameters())
        micro = list(zip(split(x, k), split(y, k), strict=True))

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            for xi, yi in micro:
                with autocast():
                    loss = m.loss_fn(model(xi), yi) / k
                loss.backward()
            optimizer.step()
            sync()

    time_steps(step, args)


if __name__ == "__main__":
    main()
