"""The comparer: two dumps (docs/formats.md) -> per-tensor rungs and a gate verdict.

  python -m forge_ref.compare ENGINE REF --gate G --profile P --required RUNG
         [--md OUT.md] [--json OUT.json] [--plot OUT.png]
         [--engine-val V --ref-val V] [--engine-log F --ref-log F]

ENGINE and REF are dump directories (index.json + step files) or JSONL step logs (lines
{"step", "loss", ...}; a log gives a loss curve only, for CONVERGENT and the plot). The
last line printed is `gate G profile P: RUNG`; the exit code is 0 only when RUNG reaches
--required (1 when it does not, 2 on a usage or file error).

Rungs (../shared/EQUIVALENCE.md): BITWISE > TOLERANCE > CONVERGENT > NONE. A tensor is
BITWISE when every bit pattern matches, TOLERANCE when rel_l2 <= 1e-5 (2e-2 for bf16; the
loss uses |d| <= 1e-5*|ref|, 2e-3*|ref| for bf16), NONE otherwise, and NONE whenever a NaN or
Inf appears on either side. CONVERGENT belongs to a run's loss curve: checked for the
long-horizon gate (or with --convergence): mean over steps 101..200 of |loss-ref|/ref < 1%
and final validation losses within 1%. SURPASS is the perf gate's rung: CONVERGENT, the
engine's final validation loss no more than 0.5% above the reference's, and the engine's
tokens/s above the reference's, both read from the two step logs of the same run (median
step time after PERF_WARMUP steps; both sides train the same tokens per step).

The first failing tensor is looked for step by step, and inside a step in the order the
computation produces them, so that it names where a divergence starts: act.* in forward
order, loss, actgrad.* and grad.* in backward order, grad_norm, then param.*.
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np

from . import RefError
from .safetensors_io import load_numpy, write_atomically

RUNGS = ["NONE", "CONVERGENT", "TOLERANCE", "BITWISE"]
RANK = {r: i for i, r in enumerate(RUNGS)}
SURPASS = "SURPASS"  # the perf gate's rung: CONVERGENT and more (speed, validation loss)
PERF_VAL_TOL = 0.005
PERF_WARMUP = 10
BOUNDS = {"fp32": {"rel_l2": 1e-5, "loss": 1e-5}, "bf16": {"rel_l2": 2e-2, "loss": 2e-3}}
CONV_WINDOW = (101, 200)
CONV_TOL = 0.01


# ---------------------------------------------------------------------------- inputs

class Run:
    """One side: a dump (tensors per step) and/or a loss curve."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        self.steps, self.files, self.level, self.source = [], {}, 0, "?"
        self.losses = {}  # step -> float
        if os.path.isdir(path):
            self._read_index()
        elif os.path.isfile(path):
            self.losses.update(read_log(path))
            self.source = "log " + os.path.basename(path)
        else:
            raise RefError(f"{path}: no such dump directory or log file ({label})")

    def _read_index(self):
        ipath = os.path.join(self.path, "index.json")
        try:
            with open(ipath, "r", encoding="utf-8") as f:
                idx = json.load(f)
        except OSError as e:
            raise RefError(f"{ipath}: cannot read the dump index: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise RefError(f"{ipath}: invalid JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(idx, dict) or idx.get("format") != "forge-dump":
            raise RefError(f"{ipath}: field 'format' must be \"forge-dump\"")
        if idx.get("version") != 1:
            raise RefError(f"{ipath}: field 'version' is {idx.get('version')!r}, expected 1")
        steps, files = idx.get("steps"), idx.get("files")
        if not isinstance(steps, list) or not all(isinstance(s, int) and s >= 1 for s in steps):
            raise RefError(f"{ipath}: field 'steps' must be a list of 1-based step numbers")
        if not isinstance(files, dict):
            raise RefError(f"{ipath}: field 'files' must map steps to file names")
        for s in steps:
            if str(s) not in files:
                raise RefError(f"{ipath}: field 'files' has no entry for step {s}")
        self.steps = sorted(steps)
        self.files = {s: os.path.join(self.path, files[str(s)]) for s in steps}
        self.level = idx.get("level", 0)
        self.source = str(idx.get("source", "?"))

    def load_step(self, step):
        tensors, _ = load_numpy(self.files[step])
        if "loss" in tensors and tensors["loss"].size == 1:
            self.losses.setdefault(step, float(tensors["loss"].reshape(-1)[0]))
        return tensors

    def scan_losses(self):
        """Fills the loss curve from the dump's step files (only their loss tensor matters)."""
        for s in self.steps:
            if s not in self.losses:
                self.load_step(s)


def read_log(path, field="loss"):
    """{step: value of `field`} from a JSONL step log (docs/formats.md, "Step logs")."""
    out = {}
    with open(path, "r", encoding="utf-8") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue  # tolerate stray non-JSON output mixed into a captured stdout
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise RefError(f"{path}:{lineno}: invalid JSON line") from None
        if isinstance(rec, dict) and "step" in rec and field in rec:
            out[int(rec["step"])] = float(rec[field])
    if not out:
        raise RefError(f"{path}: no step lines with 'step' and '{field}'")
    return out


def check_speed(ms_e, ms_r):
    """Median step time of each side over the steps after PERF_WARMUP (start-up, first-touch
    page faults and allocator growth are not the steady state being compared)."""
    def median_after_warmup(ms):
        steps = sorted(ms)
        kept = [ms[s] for s in steps if s > PERF_WARMUP] or [ms[s] for s in steps]
        kept.sort()
        n = len(kept)
        return (kept[n // 2] if n % 2 else 0.5 * (kept[n // 2 - 1] + kept[n // 2])), n
    e, ne = median_after_warmup(ms_e)
    r, nr = median_after_warmup(ms_r)
    return {"engine_ms": e, "reference_ms": r, "steps_engine": ne, "steps_reference": nr,
            "speedup": r / e if e > 0 else math.inf, "ok": e < r}


def read_val(value, what):
    """A number, a JSON file {"val_loss": v} (the reference's --val-out), or a JSONL log whose
    last line with val_loss wins (the engine's metrics.jsonl)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    found = None
    try:
        with open(value, "r", encoding="utf-8") as f:
            text = f.read()
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            docs = [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]
        for d in docs:
            if isinstance(d, dict) and "val_loss" in d:
                found = float(d["val_loss"])
    except (OSError, ValueError, TypeError):
        found = None
    if found is None:
        raise RefError(f"{what}: expected a number or a JSON/JSONL file with 'val_loss', got '{value}'")
    return found


# ---------------------------------------------------------------------------- ordering

_LAYER = re.compile(r"(?:^|\.)h\.(\d+)\.")


def _layer_count(names):
    n = 0
    for name in names:
        m = _LAYER.search(name)
        if m:
            n = max(n, int(m.group(1)) + 1)
    return n


def forward_modules(L):
    names = ["embed"]
    for i in range(L):
        p = f"h.{i}."
        names += [p + m for m in ("ln_1", "attn.c_attn", "attn.sdpa", "attn.c_proj", "res_1",
                                  "ln_2", "mlp.c_fc", "mlp.gelu", "mlp.c_proj", "res_2")]
    return names + ["ln_f", "logits"]


def param_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(L):
        p = f"transformer.h.{i}."
        for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names += [p + m + ".weight", p + m + ".bias"]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def step_order(names):
    """Sorts one step's tensor names in computation order (see the module docstring)."""
    L = _layer_count(names)
    fwd, prm = forward_modules(L), param_names(L)
    order = (["act." + m for m in fwd] + ["loss"] + ["actgrad." + m for m in reversed(fwd)] +
             ["grad." + p for p in reversed(prm)] + ["grad_norm"] + ["param." + p for p in prm])
    pos = {n: i for i, n in enumerate(order)}
    return sorted(names, key=lambda n: (pos.get(n, len(order)), n))


# ---------------------------------------------------------------------------- metrics

def _ordered(bits):
    # IEEE floats ordered as integers: negative values mirror below zero, so the integer
    # distance of two floats is the number of representable floats between them.
    i = bits.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def compare_tensor(name, a, b, bounds):
    """a: engine, b: reference. Returns a record with the rung reached and the errors."""
    rec = {"name": name, "shape": list(b.shape), "rung": "NONE", "max_ulp": None, "max_abs": None,
           "rel_l2": None, "first_diff": None, "note": ""}
    if a.shape != b.shape:
        rec["note"] = f"shape {list(a.shape)} in the engine, {list(b.shape)} in the reference"
        return rec
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(b.shape)
    b = np.ascontiguousarray(b, dtype=np.float32)
    ab, bb = a.view(np.uint32), b.view(np.uint32)
    differ = ab != bb
    if differ.any():
        flat = int(np.argmax(differ.reshape(-1)))
        rec["first_diff"] = {"flat": flat,
                             "index": [int(v) for v in np.unravel_index(flat, b.shape)] if b.ndim else [],
                             "engine": float(a.reshape(-1)[flat]), "ref": float(b.reshape(-1)[flat])}
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (fa.all() and fb.all()):
        rec["note"] = (f"non-finite values: engine {int((~fa).sum())}, reference {int((~fb).sum())}")
        return rec
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = a64 - b64
    rec["max_abs"] = float(np.abs(d).max()) if d.size else 0.0
    if differ.any():
        w = int(np.argmax(np.abs(d).reshape(-1)))
        rec["worst_diff"] = {"flat": w, "index": [int(v) for v in np.unravel_index(w, b.shape)] if b.ndim else [],
                             "engine": float(a.reshape(-1)[w]), "ref": float(b.reshape(-1)[w])}
    rec["max_ulp"] = int(np.abs(_ordered(ab) - _ordered(bb)).max()) if d.size else 0
    nd, nb = float(np.sqrt((d * d).sum())), float(np.sqrt((b64 * b64).sum()))
    rec["rel_l2"] = 0.0 if nd == 0 else (nd / nb if nb > 0 else math.inf)
    if not differ.any():
        rec["rung"] = "BITWISE"
    else:
        bound = bounds["loss"] if name == "loss" else bounds["rel_l2"]
        rec["bound"] = bound
        if rec["rel_l2"] <= bound:  # for a scalar, rel_l2 is |d|/|ref|
            rec["rung"] = "TOLERANCE"
    return rec


def check_convergence(eng, ref, val_e, val_r):
    lo, hi = CONV_WINDOW
    res = {"window": [lo, hi], "ok": False, "mean_rel": None, "val_engine": val_e, "val_ref": val_r,
           "val_rel": None, "reason": ""}
    missing = [s for s in range(lo, hi + 1) if s not in eng or s not in ref]
    if missing:
        res["reason"] = f"loss curves lack step {missing[0]} (need steps {lo}..{hi} on both sides)"
        return res
    rels = [abs(eng[s] - ref[s]) / abs(ref[s]) for s in range(lo, hi + 1)]
    if not all(math.isfinite(r) for r in rels):
        res["reason"] = "non-finite loss in steps %d..%d" % (lo, hi)
        return res
    res["mean_rel"] = sum(rels) / len(rels)
    if val_e is None or val_r is None:
        res["reason"] = "final validation losses not given (--engine-val, --ref-val)"
        return res
    if not (math.isfinite(val_e) and math.isfinite(val_r)):
        res["reason"] = "non-finite validation loss"
        return res
    res["val_rel"] = abs(val_e - val_r) / abs(val_r)
    if res["mean_rel"] >= CONV_TOL:
        res["reason"] = f"mean relative loss difference {res['mean_rel']:.3g} >= {CONV_TOL}"
    elif res["val_rel"] >= CONV_TOL:
        res["reason"] = f"final validation loss differs by {res['val_rel']:.3g} >= {CONV_TOL}"
    else:
        res["ok"] = True
    return res


# ---------------------------------------------------------------------------- the gate

_K_BIAS = re.compile(r"^param\.transformer\.h\.\d+\.attn\.c_attn\.bias$")


def compare_without_k_bias(name, a, b, bounds):
    """param.*.attn.c_attn.bias with its key slice [C, 2C) left out of the rung.

    The loss does not depend on the key bias (it adds q.b_k to every score of a row, which
    softmax ignores), so its gradient is pure rounding noise (~1e-11) that Adam normalises
    into updates of ~1e-7: two correct fp32 implementations disagree there completely. The
    slice's own difference is reported in the note."""
    C = b.shape[0] // 3
    keep = np.r_[0:C, 2 * C:3 * C]
    rec = compare_tensor(name, a[keep], b[keep], bounds)
    rec["shape"] = list(b.shape)
    for key in ("first_diff", "worst_diff"):
        if rec.get(key):
            flat = int(keep[rec[key]["flat"]])
            rec[key].update(flat=flat, index=[flat])
    kd = np.abs(a[C:2 * C].astype(np.float64) - b[C:2 * C].astype(np.float64))
    rec["note"] = (rec["note"] + "; " if rec["note"] else "") + \
        f"key slice [{C}, {2 * C}) exempt (max abs diff {kd.max():.3e})"
    return rec


def run_gate(engine, ref, gate, profile, required, convergence=False, val_e=None, val_r=None,
             exclude=(), exempt_k_bias=False, speed=None):
    """exclude: regular expressions of tensor names reported but not counted in the verdict.
    exempt_k_bias: see compare_without_k_bias."""
    bounds = BOUNDS["bf16" if profile == "bf16" else "fp32"]
    excl = [re.compile(x) for x in exclude]
    records, excluded = [], []
    k_bias_exempted = False
    for s in sorted(set(engine.steps) | set(ref.steps)):
        if s not in engine.steps or s not in ref.steps:
            side = "engine" if s not in engine.steps else "reference"
            records.append({"step": s, "name": "*", "shape": [], "rung": "NONE", "max_ulp": None,
                            "max_abs": None, "rel_l2": None, "first_diff": None,
                            "note": f"step {s} missing in the {side} dump"})
            continue
        te, tr = engine.load_step(s), ref.load_step(s)
        for name in step_order(set(te) | set(tr)):
            if name not in te or name not in tr:
                side = "engine" if name not in te else "reference"
                rec = {"name": name, "shape": list((tr.get(name) if name in tr else te[name]).shape),
                       "rung": "NONE", "max_ulp": None, "max_abs": None, "rel_l2": None,
                       "first_diff": None, "note": f"missing in the {side} dump"}
            else:
                a, b = te[name], tr[name]
                if (exempt_k_bias and _K_BIAS.match(name) and a.shape == b.shape and b.ndim == 1
                        and b.shape[0] % 3 == 0):
                    rec = compare_without_k_bias(name, a, b, bounds)
                    k_bias_exempted = True
                else:
                    rec = compare_tensor(name, a, b, bounds)
            rec["step"] = s
            (excluded if any(x.search(name) for x in excl) else records).append(rec)

    conv = None
    if convergence:
        engine.scan_losses()
        ref.scan_losses()
        conv = check_convergence(engine.losses, ref.losses, val_e, val_r)

    if records:
        tensor_rung = min((r["rung"] for r in records), key=RANK.get)
    else:
        tensor_rung = None
    if tensor_rung is not None and RANK[tensor_rung] >= RANK["TOLERANCE"]:
        verdict = tensor_rung
    elif conv is not None and conv["ok"]:
        verdict = "CONVERGENT"
    else:
        verdict = "NONE"

    perf = None
    if speed is not None:
        # SURPASS sits beside the accuracy rungs: it asks for CONVERGENT and more.
        perf = dict(speed)
        perf["val_ok"] = bool(conv and conv["val_engine"] is not None and conv["val_ref"] is not None
                              and conv["val_engine"] <= conv["val_ref"] * (1 + PERF_VAL_TOL))
        reasons = []
        if verdict == "NONE":
            reasons.append("not CONVERGENT")
        if not perf["val_ok"]:
            reasons.append(f"final validation loss more than {PERF_VAL_TOL:.1%} above the reference's")
        if not perf["ok"]:
            reasons.append(f"engine not faster (median step {perf['engine_ms']:.1f} ms vs "
                           f"{perf['reference_ms']:.1f} ms)")
        perf["reason"] = "; ".join(reasons)
        if verdict != "NONE" and perf["val_ok"] and perf["ok"]:
            verdict = SURPASS
    if required == SURPASS:
        passed = verdict == SURPASS
    else:
        passed = verdict in RANK and RANK[verdict] >= RANK[required]

    first = None
    if not passed and required != SURPASS:
        # Tensors are named against the required rung; a CONVERGENT requirement is about
        # the curve, so then the first tensor below TOLERANCE is named for information.
        need = required if RANK[required] >= RANK["TOLERANCE"] else "TOLERANCE"
        for r in records:
            if RANK[r["rung"]] < RANK[need]:
                first = r
                break
    return {"gate": gate, "profile": profile, "required": required, "verdict": verdict,
            "passed": passed, "bounds": bounds, "perf": perf,
            "engine": {"path": engine.path, "source": engine.source, "level": engine.level},
            "reference": {"path": ref.path, "source": ref.source, "level": ref.level},
            "first_failure": first, "convergence": conv, "tensors": records,
            "excluded": {"patterns": list(exclude), "tensors": excluded},
            # whether a key slice was left out (a model without c_attn biases has none)
            "exempt_k_bias": k_bias_exempted,
            "loss": {"engine": {str(k): v for k, v in sorted(engine.losses.items())},
                     "reference": {str(k): v for k, v in sorted(ref.losses.items())}}}


# ---------------------------------------------------------------------------- reports

def _fmt(v, spec=".3e"):
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return format(v, spec)


def describe(r):
    if r is None:
        return "none"
    s = f"step {r['step']} `{r['name']}` {r['shape']}: {r['rung']}"
    if r.get("max_ulp") is not None:
        s += f", max ULP {r['max_ulp']}, max abs {_fmt(r['max_abs'])}, rel_l2 {_fmt(r['rel_l2'])}"
    if r.get("first_diff"):
        fd = r["first_diff"]
        s += (f", first differing element {fd['flat']} {tuple(fd['index'])}: "
              f"engine {fd['engine']!r} vs reference {fd['ref']!r}")
    wd = r.get("worst_diff")
    if wd and fd and wd["flat"] != fd["flat"]:
        s += (f"; largest difference at {wd['flat']} {tuple(wd['index'])}: "
              f"engine {wd['engine']!r} vs reference {wd['ref']!r}")
    if r.get("note"):
        s += f" ({r['note']})"
    return s


def markdown(rep):
    lines = [f"# gate {rep['gate']}, profile {rep['profile']}: {rep['verdict']}", "",
             f"- required: {rep['required']} -> {'PASS' if rep['passed'] else 'FAIL'}",
             f"- engine: `{rep['engine']['path']}` ({rep['engine']['source']}, level {rep['engine']['level']})",
             f"- reference: `{rep['reference']['path']}` ({rep['reference']['source']}, level {rep['reference']['level']})",
             f"- bounds: rel_l2 <= {rep['bounds']['rel_l2']:g}, loss |d| <= {rep['bounds']['loss']:g}*|ref|",
             f"- first failing tensor: {describe(rep['first_failure'])}"]
    if rep.get("exempt_k_bias"):
        lines.append("- the key slice of param.*.attn.c_attn.bias is exempt (the loss does not depend "
                     "on it; its updates are Adam-normalised rounding noise)")
    conv = rep["convergence"]
    if conv is not None:
        lines.append(f"- convergence (steps {conv['window'][0]}..{conv['window'][1]}): "
                     f"{'ok' if conv['ok'] else 'not reached'}; mean |loss-ref|/ref {_fmt(conv['mean_rel'])}, "
                     f"val engine {_fmt(conv['val_engine'], '.6f')} ref {_fmt(conv['val_ref'], '.6f')} "
                     f"rel {_fmt(conv['val_rel'])}" + (f"; {conv['reason']}" if conv["reason"] else ""))
    perf = rep.get("perf")
    if perf is not None:
        lines.append(f"- speed (median step after {PERF_WARMUP} warm-up steps, same run): engine "
                     f"{perf['engine_ms']:.1f} ms, reference {perf['reference_ms']:.1f} ms: "
                     f"{perf['speedup']:.2f}x; final validation loss within {PERF_VAL_TOL:.1%}: "
                     f"{'yes' if perf['val_ok'] else 'no'}" + (f"; {perf['reason']}" if perf["reason"] else ""))
    # One row per tensor name, worst over the steps: a per-step table would run to
    # thousands of rows on a long run (the JSON report has them all).
    worst, count = {}, {}
    for r in rep["tensors"]:
        count[r["name"]] = count.get(r["name"], 0) + 1
        if r["name"] not in worst or _badness(r) < _badness(worst[r["name"]]):
            worst[r["name"]] = r
    if worst:
        lines += ["", "## Tensors (worst step of each)", "",
                  "| tensor | shape | rung | steps | worst step | max ULP | max abs | rel_l2 | first diff |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for n, r in worst.items():  # dicts keep the first-seen (computation) order
            fd = r["first_diff"]
            fds = f"{fd['flat']} {tuple(fd['index'])}" if fd else "-"
            lines.append(f"| `{n}` | {r['shape']} | {r['rung']} | {count[n]} | {r['step']} | {_fmt(r['max_ulp'])} | "
                         f"{_fmt(r['max_abs'])} | {_fmt(r['rel_l2'])} | {fds} |")
    ex = rep["excluded"]
    if ex["tensors"]:
        lines += ["", f"## Excluded from the verdict ({', '.join('`%s`' % p for p in ex['patterns'])})", ""]
        for r in ex["tensors"]:
            lines.append(f"- {describe(r)}")
    le, lr = rep["loss"]["engine"], rep["loss"]["reference"]
    common = sorted(int(s) for s in le if s in lr)
    if common:
        shown = common if len(common) <= 30 else common[:20] + common[-10:]
        lines += ["", "## Loss", "", "| step | engine | reference | rel diff |", "| --- | --- | --- | --- |"]
        for s in shown:
            e, r = le[str(s)], lr[str(s)]
            rel = abs(e - r) / abs(r) if r else math.inf
            lines.append(f"| {s} | {e:.7f} | {r:.7f} | {rel:.3e} |")
        if len(shown) < len(common):
            lines.append(f"| ... | ({len(common) - len(shown)} steps omitted) | | |")
    return "\n".join(lines) + "\n"


def plot(rep, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RefError(f"{path}: matplotlib is not available in this interpreter "
                       "(run the comparer with the project's .venv)") from None
    le, lr = rep["loss"]["engine"], rep["loss"]["reference"]
    se = sorted(int(s) for s in le)
    sr = sorted(int(s) for s in lr)
    common = [s for s in se if str(s) in lr]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(sr, [lr[str(s)] for s in sr], label=f"reference ({rep['reference']['source']})", lw=1.5)
    ax1.plot(se, [le[str(s)] for s in se], label=f"engine ({rep['engine']['source']})", lw=1.0, ls="--")
    ax1.set_ylabel("training loss")
    ax1.set_title(f"gate {rep['gate']}, profile {rep['profile']}: {rep['verdict']}")
    ax1.legend()
    rel = [abs(le[str(s)] - lr[str(s)]) / abs(lr[str(s)]) if lr[str(s)] else math.nan for s in common]
    # Bitwise-equal curves have zero difference, which a log axis cannot draw.
    floor = 1e-10
    ax2.semilogy(common, [max(r, floor) for r in rel], lw=1.0)
    ax2.set_ylabel("|engine - ref| / ref")
    ax2.set_xlabel("step")
    ax2.axhline(CONV_TOL, color="gray", ls=":", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write_text(path, text):
    write_atomically(path, lambda f: f.write(text), "w", "report")


def _json_safe(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {k: _json_safe(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_json_safe(v) for v in o]
    return o


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m forge_ref.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", help="the engine's dump directory or JSONL log")
    ap.add_argument("ref", help="the reference's dump directory or JSONL log")
    ap.add_argument("--gate", required=True)
    ap.add_argument("--profile", required=True, help="fast | torch-cpu | bf16 (bf16 selects the bf16 bounds)")
    ap.add_argument("--required", required=True, choices=RUNGS + [SURPASS])
    ap.add_argument("--md", metavar="OUT.md")
    ap.add_argument("--json", metavar="OUT.json")
    ap.add_argument("--plot", metavar="OUT.png")
    ap.add_argument("--convergence", action="store_true",
                    help="check CONVERGENT from the loss curves (implied by --gate long-horizon)")
    ap.add_argument("--engine-val", help="engine's final validation loss (number or JSON file)")
    ap.add_argument("--ref-val", help="reference's final validation loss (number or JSON file)")
    ap.add_argument("--exclude", action="append", default=[], metavar="REGEX",
                    help="tensor names (regular expression) reported but left out of the verdict; "
                         "repeatable. Every use is printed in the report")
    ap.add_argument("--exempt-k-bias", action="store_true",
                    help="leave the key slice of param.*.attn.c_attn.bias out of the rung (see "
                         "compare_without_k_bias); meant for non-bitwise profiles")
    ap.add_argument("--engine-log", help="JSONL step log adding to the engine's loss curve")
    ap.add_argument("--ref-log", help="JSONL step log adding to the reference's loss curve")
    args = ap.parse_args(argv)

    engine, ref = Run(args.engine, "engine"), Run(args.ref, "reference")
    if args.engine_log:
        engine.losses.update(read_log(args.engine_log))
    if args.ref_log:
        ref.losses.update(read_log(args.ref_log))
    conv = args.convergence or args.gate in ("long-horizon", "perf")
    speed = None
    if args.gate == "perf":
        if not (args.engine.endswith(".jsonl") and args.ref.endswith(".jsonl")):
            raise RefError("--gate perf compares two JSONL step logs (with 'ms'), not dumps")
        speed = check_speed(read_log(args.engine, "ms"), read_log(args.ref, "ms"))
    rep = run_gate(engine, ref, args.gate, args.profile, args.required, convergence=conv,
                   val_e=read_val(args.engine_val, "--engine-val"), val_r=read_val(args.ref_val, "--ref-val"), exclude=args.exclude,
                   exempt_k_bias=args.exempt_k_bias, speed=speed)
    if args.plot:
        engine.scan_losses()
        ref.scan_losses()
        rep["loss"] = {"engine": {str(k): v for k, v in sorted(engine.losses.items())},
                       "reference": {str(k): v for k, v in sorted(ref.losses.items())}}
    md = markdown(rep)
    if args.md:
        _write_text(args.md, md)
    if args.json:
        _write_text(args.json, json.dumps(_json_safe(rep), indent=1) + "\n")
    if args.plot:
        plot(rep, args.plot)
    print(f"worst tensor / first failure: {describe(rep['first_failure'] or _worst(rep['tensors']))}")
    print(f"gate {args.gate} profile {args.profile}: {rep['verdict']}")
    return 0 if rep["passed"] else 1


def _badness(r):
    # Lower is worse: the rung first, then the larger rel_l2 (unknown counts as infinite).
    return (RANK[r["rung"]], -(r["rel_l2"] if r["rel_l2"] is not None else math.inf))


def _worst(records):
    return min(records, key=_badness) if records else None


if __name__ == "__main__":
    # Exit 0: the gate passed, 1: it failed; anything else is the comparer's own failure, which
    # verify must not read as a verdict (an uncaught exception would exit 1 as well).
    try:
        sys.exit(main())
    except RefError as e:
        print(f"forge_ref.compare: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception:  # noqa: BLE001 - reported in full, then a status verify tells apart
        import traceback
        traceback.print_exc()
        sys.exit(3)
