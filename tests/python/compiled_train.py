"""A CPU training run for tests/python/torch_compile_test.py.

  compiled_train.py compile  (torch >= 2.0)
    1. torch.compile(a function calling the model, fullgraph=True): raises
       at the first graph break, so a hook that is not compile-safe fails it;
    2. four calls of a fullgraph-compiled train step (forward, backward and a
       plain optimizer's step): no Python optimizer call at run time.
    Prints "BREAKS <n>" and one "BREAK <reason>" line per graph-break reason
    (Dynamo's counters), then "DONE".
  compiled_train.py graph    (any torch; CPU: the CUDA graph is faked)
    two eager steps, a captured step (the optimizer runs while "capturing"),
    then five replays. Prints "REPLAYS 5" and "DONE".
"""

import sys

import torch

torch.manual_seed(0)


class PlainSGD(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def make(opt_cls):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return model, opt_cls(model.parameters(), lr=0.05)


X, Y = torch.randn(8, 16), torch.randn(8, 1)


def compile_run():
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.config.trace_autograd_ops = True  # backward() inside the graph

    model, _ = make(torch.optim.SGD)
    torch.compile(lambda x: model(x), fullgraph=True)(X)

    model2, opt2 = make(PlainSGD)

    def plain_step(x, y):
        loss = torch.nn.functional.mse_loss(model2(x), y)
        loss.backward()
        opt2.step()
        return loss.detach()

    step2 = torch.compile(plain_step, fullgraph=True)
    for _ in range(4):
        opt2.zero_grad(set_to_none=True)
        step2(X, Y)
    reasons = counters["graph_break"]
    print("BREAKS %d" % sum(reasons.values()))
    for reason in sorted(reasons):
        print("BREAK %s" % reason.splitlines()[0])


def graph_run():
    # CPU builds have only a placeholder base class: give it no-op methods.
    base = torch.cuda.CUDAGraph.__mro__[1]
    replays = []
    base.__new__ = lambda cls, *a, **k: object.__new__(cls)
    base.__init__ = lambda self, *a, **k: None
    base.capture_begin = lambda self, *a, **k: None
    base.capture_end = lambda self, *a, **k: None
    base.replay = lambda self, *a, **k: replays.append(1)

    model, opt = make(torch.optim.SGD)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(X), Y).backward()
        opt.step()

    for _ in range(2):
        step()
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin()
    step()
    graph.capture_end()
    for _ in range(5):
        graph.replay()
    print("REPLAYS %d" % len(replays))


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_run()
    else:
        graph_run()
    print("DONE")
