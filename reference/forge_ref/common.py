"""What the model families (gpt2.py, llama.py) share: the activation capture of the level-2
dump and the checked copy of loaded parameters into a model."""

import torch

from . import RefError


class Capture:
    """Collects named activations and keeps their gradients (retain_grad) for the dump."""

    def __init__(self):
        self.acts = {}

    def __call__(self, name, t):
        if t.requires_grad:
            t.retain_grad()
        self.acts[name] = t
        return t


def nocap(name, t):
    return t


def new_capture():
    return Capture()


def copy_checked(model, internal, where, file_tensors=None, file_shape=lambda name, shape: shape):
    """Copies {parameter name: tensor in the model's layout} into model's parameters: the
    names must match exactly, shapes and dtype (float32) agree. Errors name the file layout:
    file_tensors are the tensors as read (default: internal) and file_shape(name, shape)
    turns a parameter's shape into its shape in the file."""
    file_tensors = internal if file_tensors is None else file_tensors
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in internal]
    unknown = [n for n in internal if n not in params]
    if missing:
        raise RefError(f"{where}: missing tensor '{missing[0]}'" +
                       (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    if unknown:
        raise RefError(f"{where}: unexpected tensor '{unknown[0]}' (not a parameter of this config)")
    with torch.no_grad():
        for n, p in params.items():
            t = internal[n]
            if tuple(t.shape) != tuple(p.shape):
                got, want = tuple(file_tensors[n].shape), tuple(file_shape(n, tuple(p.shape)))
                raise RefError(f"{where}: tensor '{n}' has shape {list(got)}, expected {list(want)}")
            if t.dtype != torch.float32:
                raise RefError(f"{where}: tensor '{n}' is {t.dtype}, expected float32 (F32)")
            p.copy_(t)
