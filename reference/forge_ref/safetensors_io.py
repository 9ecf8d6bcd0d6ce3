"""A small safetensors reader and writer (numpy + torch only).

Debian's python3-torch comes without the `safetensors` package, and the bit-for-bit
reference runs there, so the format is implemented here: an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
then the raw little-endian bytes. Files written here load with the real package and with
the engine's reader (src/forge/io/safetensors.h); the tests check the first.
"""

import json
import os
import struct

import numpy as np
import torch

from . import RefError

# dtype name -> (numpy dtype, bytes per element). BF16 has no numpy dtype: its bits travel
# as uint16 and are widened to float32 (exactly) or viewed as torch.bfloat16.
_NP = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U16": (np.dtype("<u2"), 2),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}

_TORCH_TO_NAME = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}

_NP_TO_NAME = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint16"): "U16",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}

# The real package refuses headers above 100 MB; so do we, so a corrupt length fails fast.
_MAX_HEADER = 100 * 1000 * 1000


def _bf16_bits(t):
    # bf16 -> f32 is exact and the top 16 bits of the f32 are the bf16 bits; going through
    # float32 avoids Tensor.view(dtype) corner cases across torch versions.
    f = t.detach().to("cpu", torch.float32).contiguous().numpy()
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def _to_bytes(name, value):
    """Returns (dtype name, shape, bytes) for a torch tensor or numpy array."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in _TORCH_TO_NAME:
            raise RefError(f"safetensors: tensor '{name}' has unsupported dtype {value.dtype}")
        dname = _TORCH_TO_NAME[value.dtype]
        shape = list(value.shape)
        if dname == "BF16":
            arr = _bf16_bits(value)
        else:
            arr = value.detach().to("cpu").contiguous().numpy()
    elif isinstance(value, np.ndarray):
        if value.dtype not in _NP_TO_NAME:
            raise RefError(f"safetensors: array '{name}' has unsupported dtype {value.dtype}")
        dname = _NP_TO_NAME[value.dtype]
        shape = list(value.shape)
        arr = value
    else:
        raise RefError(f"safetensors: '{name}' is a {type(value).__name__}, not a tensor")
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    # tobytes(order="C") lays out any view, 0-d included, in row-major order.
    return dname, shape, arr.tobytes(order="C")


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} to path atomically (temporary file, fsync, rename)."""
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise RefError(f"{path}: safetensors metadata must map strings to strings ({k!r})")
    # The real package orders the data by alignment then name; any order is valid to a
    # reader, and sorting by name alone keeps files byte-identical across runs.
    entries = []
    for name in sorted(tensors):
        entries.append((name,) + _to_bytes(name, tensors[name]))
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, dname, shape, data in entries:
        header[name] = {"dtype": dname, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad with spaces so the data starts 8-byte aligned, as the real writer does.
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)

    def write(f):
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for _, _, _, data in entries:
            f.write(data)

    write_atomically(path, write, "wb", "safetensors file")


def write_atomically(path, write, mode, what):
    """Fills a temporary file beside path with write(f) and renames it over path, so that
    readers see the old file or the whole new one; on a failure (a full disk) the temporary
    goes and RefError names the file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise RefError(f"{path}: cannot write {what}: {e.strerror or e}") from None


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset, raw bytes)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RefError(f"{path}: cannot read safetensors file: {e.strerror}") from None
    if len(raw) < 8:
        raise RefError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise RefError(f"{path}: not a safetensors file (header length {n} exceeds the file)")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RefError(f"{path}: safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise RefError(f"{path}: safetensors header must be a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_len = len(raw) - 8 - n
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise RefError(f"{path}: tensor '{name}' needs exactly dtype, shape, data_offsets")
        if info["dtype"] not in _NP:
            raise RefError(f"{path}: tensor '{name}' has unsupported dtype '{info['dtype']}'")
        shape = info["shape"]
        if not isinstance(shape, list) or any((not isinstance(d, int)) or d < 0 for d in shape):
            raise RefError(f"{path}: tensor '{name}' has an invalid shape {shape!r}")
        b, e = info["data_offsets"]
        numel = 1
        for d in shape:
            numel *= d
        if not (0 <= b <= e <= data_len) or e - b != numel * _NP[info["dtype"]][1]:
            raise RefError(f"{path}: tensor '{name}' data_offsets [{b}, {e}] do not match "
                           f"dtype {info['dtype']} shape {shape} within {data_len} data bytes")
        spans.append((b, e, name))
    # The format requires the tensors to tile the data section with no gap or overlap.
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise RefError(f"{path}: tensor '{name}' starts at byte {b}, expected {pos} "
                           "(gap or overlap in the data section)")
        pos = e
    if pos != data_len:
        raise RefError(f"{path}: {data_len - pos} trailing bytes after the last tensor")
    return header, metadata, 8 + n, raw


def load_numpy(path, widen_bf16=True):
    """Returns ({name: numpy array}, metadata). BF16 becomes float32 (an exact widening)
    unless widen_bf16 is False, in which case its raw uint16 bits are returned."""
    header, metadata, start, raw = read_header(path)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        npdt = _NP[info["dtype"]][0]
        arr = np.frombuffer(raw, dtype=npdt, count=(e - b) // npdt.itemsize, offset=start + b)
        arr = arr.reshape(tuple(info["shape"])).copy()
        if info["dtype"] == "BF16" and widen_bf16:
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out, metadata


def load_file(path):
    """Returns ({name: torch tensor}, metadata). BF16 comes back as torch.bfloat16; U16 is
    widened to int32 because torch 1.13 has no uint16 tensors."""
    header, _, _, _ = read_header(path)
    arrays, metadata = load_numpy(path, widen_bf16=True)
    out = {}
    for name, arr in arrays.items():
        dt = header[name]["dtype"]
        if dt == "U16":
            arr = arr.astype(np.int32)
        # np.ascontiguousarray would turn a 0-d tensor into shape [1]; arrays from
        # load_numpy are fresh copies, already contiguous.
        t = torch.from_numpy(arr)
        if dt == "BF16":
            t = t.to(torch.bfloat16)
        out[name] = t
    return out, metadata
