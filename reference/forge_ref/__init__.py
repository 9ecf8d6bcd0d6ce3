"""forge's golden reference: GPT-2 in plain torch.nn, its trainer, dumper and comparer.

The same files run under the project's .venv (PyTorch 2.x, reference of the `fast` and
`bf16` profiles) and under Debian's /usr/bin/python3 (PyTorch 1.13.1, reference of the
bit-for-bit `torch-cpu` profile), so nothing here may need a package that only one of them
has (safetensors, transformers and matplotlib are imported lazily where they are optional).
"""


class RefError(Exception):
    """A user-facing error: the message names the file and the field."""
