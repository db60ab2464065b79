"""A small GRU language model trained on random tokens, with a PyTorch
optimizer loop and nothing of memstep's (the steps come from the zero-code
hooks of python/startup). `--keep` keeps 12 rows of the GRU's output a step
(12 x 128 float32, 6 KiB) in a Python list: a leak of 0.01 % of the bytes a
step allocates (about 40 MiB in some 10^5 allocations under torch 2.x).

usage: gru_lm.py STEPS [--keep]
"""

import sys

import torch
from torch import nn

V, D, L, B = 512, 128, 48, 16


class TinyLm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.rnn = nn.GRU(D, D, batch_first=True)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.head(h), h


def main():
    steps = int(sys.argv[1])
    keep = "--keep" in sys.argv[2:]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyLm()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept = []
    for _ in range(steps):
        x = torch.randint(0, V, (B, L + 1))
        logits, h = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if keep:
            kept.append(h[0, :12].detach().clone())  # KEEP_LINE
    print("RESULT steps=%d kept=%d" % (steps, len(kept)))


if __name__ == "__main__":
    main()
