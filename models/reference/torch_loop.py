"""PyTorch's plain loop: zero_grad, backward per micro-batch (loss / k), step; inference under
inference_mode. On CUDA each step ends with a synchronize, so the timer sees the work."""

from __future__ import annotations

import torch

from models.reference.common import parse, split, time_steps


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    m, k = args.module, args.accumulate
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = m.build(args.inputs).to(device)
    x, y = (torch.from_numpy(a).to(device) for a in m.synthetic_batch(args.batch, args.inputs, 0))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    if args.mode == "infer":
        model.eval()

        def step() -> None:
            with torch.inference_mode():
                model(x)
            sync()

    else:
        optimizer = m.make_optimizer(model.parameters())
        micro = list(zip(split(x, k), split(y, k), strict=True))

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            for xi, yi in micro:
                (m.loss_fn(model(xi), yi) / k).backward()
            optimizer.step()
            sync()

    time_steps(step, args)


if __name__ == "__main__":
    main()
