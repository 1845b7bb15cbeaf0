"""Jittor's plain loop: optimizer.step(loss); accumulation as its optimizer's docstring writes
it, optimizer.backward(loss / k) per micro-batch then optimizer.step(); inference under
jt.no_grad(). jt.sync_all(True) ends each step (Jittor is lazy). The parent process sets
Jittor's environment (nvcc_path, FIX_TORCH_ERROR) before this module imports it."""

from __future__ import annotations

import jittor as jt

from models.reference.common import only, parse, split, time_steps


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    only(args, ("fp32",), ("contiguous",), "Jittor")
    m, k = args.module, args.accumulate
    jt.flags.use_cuda = int(jt.has_cuda)
    jt.set_global_seed(0)
    model = m.build(args.inputs)
    images, labels = m.synthetic_batch(args.batch, args.inputs, 0)

    if args.mode == "infer":
        model.eval()
        x = jt.array(images)

        def step() -> None:
            with jt.no_grad():
                model(x).sync()
            jt.sync_all(True)

    else:
        model.train()
        optimizer = m.make_optimizer(model.parameters())
        pairs = zip(split(images, k), split(labels, k), strict=True)
        micro = [(jt.array(x), jt.array(y)) for x, y in pairs]

        def step() -> None:
            if k == 1:
                x, y = micro[0]
                optimizer.step(m.loss_fn(model(x), y))
            else:
                for x, y in micro:
                    optimizer.backward(m.loss_fn(model(x), y) / k)
                optimizer.step()
            jt.sync_all(True)

    time_steps(step, args)


if __name__ == "__main__":
    main()
