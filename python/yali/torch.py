"""PyTorch integration: YALI collectives on torch tensors.

``Communicator(group=None)``
    One process per GPU. Built from a torch.distributed process group (default WORLD): rank 0 of the
    group creates the unique id and the group carries it to the others. Lives on the rank's current
    CUDA device. Collectives, with torch.distributed's names and argument order::

        all_reduce(tensor, op="sum", out=None)
        all_gather_into_tensor(output_tensor, input_tensor)
        reduce_scatter_tensor(output, input, op="sum")
        broadcast(tensor, src)
        reduce(tensor, dst, op="sum")
        gather(tensor, gather_list=None, dst=0)
        scatter(tensor, scatter_list=None, src=0)
        all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None)

    point-to-point, NCCL's ncclSend/ncclRecv (only the two ranks take part; ``peer`` a global rank
    as torch.distributed's dst/src, ``group_peer=`` a rank of the group)::

        send(tensor, peer, stream=None)
        recv(tensor, peer, stream=None)

    the uneven exchange with counts on the device (Mixture-of-Experts layers; no host round trip, so
    a CUDA graph replays with whatever counts each step writes)::

        all_to_all_device_counts(output, input, input_splits, output_splits=None,
                                 output_offsets=None)
        expert_dispatch(output, input, send_counts, local_experts, align=1, recv_counts=None,
                        expert_offsets=None)
        expert_combine(output, input, send_counts, local_experts, align=1)

    and functional forms that return a new tensor: all_reduce_functional, all_gather_functional,
    reduce_scatter_functional, all_to_all_functional. ``src``/``dst`` are global ranks, as in
    torch.distributed (``group_src=``/``group_dst=`` take a rank of the group instead); for the
    default group the two are the same.

``SingleProcessCommunicator(devices=None)``
    One process driving several GPUs (yaliCommInitAll): the same methods, each taking one tensor per
    GPU where the Communicator takes one tensor (``all_reduce(tensors, op="sum", outs=None)``,
    ``all_gather_into_tensor(output_tensors, input_tensors)``, ...); src/dst index ``devices``.

Types: every torch dtype with an NCCL type (``DTYPES``): int8, uint8, int32, int64, float16,
bfloat16, float32, float64, float8_e4m3fn, float8_e5m2, and uint32/uint64 where torch has them;
and, as torch.distributed's NCCL backend takes them, bool (moved as uint8; reductions: sum runs as
max, prod as min, max/min as they are, avg refused) and complex64/complex128/complex32 (moved as
their torch.view_as_real, the real type with twice the elements; reductions: sum and avg only,
max/min/prod refused with a ValueError naming the op). Outputs keep the input's dtype (a complex
result is complex); the operators pass the tensors through unchanged, so in place and out= alias
exactly as for the other dtypes.
The uneven exchange (all_to_all_single with split sizes, all_to_all_device_counts, expert_dispatch,
expert_combine) moves rows along dim 0 as bytes: any dtype, output.shape[1:] == input.shape[1:].
Reductions: op "sum", "prod", "max", "min", "avg" (or a yali.RedOp, or
torch.distributed.ReduceOp.SUM, PRODUCT, MAX, MIN, AVG; never a plain int, which torch.distributed
and yali number differently: TypeError); avg is for floating types only (the library refuses it for
integers: ValueError here).
Integers wrap around (two's complement) on overflow; fp16, bf16 and fp8 accumulate in fp32; every
rank gets the same bits. Tensors must be contiguous and on the communicator's GPU.

Zero-copy: ``empty_registered(shape, dtype)`` on either communicator allocates tensors registered
with yaliCommRegister (collective: every rank calls it in the same order with the same shape). An
all_reduce whose output lies in registered memory on every rank, at the same offset (the tensor
itself, or the same view of it), runs the zero-copy ``twoshot_direct`` (the reduced shards are
written straight into every rank's output) from YALI_TWOSHOT_DIRECT_MIN_BYTES up; all_gather,
broadcast, scatter and all_to_all outputs in registered memory take their ``*_direct`` algorithm
from their YALI_*_DIRECT_MIN_BYTES up. ``register(tensor)`` registers an existing tensor's whole storage;
``deregister(tensor_or_registration)`` ends a registration (local, bounded); ``close()`` ends them all.
``algo_info(tensor, out=..., collective=...)`` tells which algorithm a call would run.

Every collective is a custom operator (``torch.ops.yali.*``) with a fake implementation, so that
``torch.compile(fullgraph=True)`` traces through it without a graph break; it launches on torch's
current stream, never synchronizes and allocates only in the functional form (and, in
all_to_all_device_counts given output_offsets without output_splits, a [world_size] temporary), so
it can be captured in a CUDA graph. Every operator is marked as having a side effect
(torch.fx.node.has_side_effect), so that a compiled graph keeps a call whose output this rank does
not read (reduce off the destination, gather off the root, an unused result): the peers wait for
it. torch honours that mark from 2.10 on; with older torch, torch.compile can still drop such a
call (keep it out of the compiled region, e.g. under torch.compiler.disable). ``comm`` is the yaliComm_t as an int (``Communicator.handle``), ``op`` a
yali.RedOp value, ``root`` a rank of the comm; ``(a!)`` marks the tensor an operator writes:

    yali::all_reduce_(Tensor(a!) tensor, int comm, int op) -> ()                  in place
    yali::all_reduce_out(Tensor tensor, Tensor(a!) out, int comm, int op) -> ()
    yali::all_reduce(Tensor tensor, int comm, int op) -> Tensor                   functional
    yali::all_gather_into_tensor(Tensor(a!) output, Tensor input, int comm) -> ()
    yali::all_gather(Tensor input, int comm, int nranks) -> Tensor
    yali::reduce_scatter_tensor(Tensor(a!) output, Tensor input, int comm, int op) -> ()
    yali::reduce_scatter(Tensor input, int comm, int op, int nranks) -> Tensor
    yali::broadcast_(Tensor(a!) tensor, int comm, int root) -> ()
    yali::reduce_(Tensor(a!) tensor, int comm, int op, int root) -> ()
    yali::gather(Tensor(a!) output, Tensor input, int comm, int root) -> ()
    yali::scatter(Tensor(a!) output, Tensor input, int comm, int root) -> ()
    yali::all_to_all_single(Tensor(a!) output, Tensor input, int comm) -> ()
    yali::all_to_all(Tensor input, int comm) -> Tensor
    yali::send(Tensor tensor, int comm, int peer) -> ()
    yali::recv_(Tensor(a!) tensor, int comm, int peer) -> ()
    yali::all_to_all_v(Tensor(a!) output, Tensor input, int[] output_split_sizes,
                       int[] input_split_sizes, int comm) -> ()
    yali::all_to_all_device_counts(Tensor(a!) output, Tensor input, Tensor input_splits,
                                   Tensor(b!)? output_splits, Tensor(c!)? output_offsets,
                                   int comm) -> ()
    yali::expert_dispatch(Tensor(a!) output, Tensor input, Tensor send_counts, int local_experts,
                          int align, Tensor(b!)? recv_counts, Tensor(c!)? expert_offsets,
                          int comm) -> ()
    yali::expert_combine(Tensor(a!) output, Tensor input, Tensor send_counts, int local_experts,
                         int align, int comm) -> ()

all_reduce_out's out has tensor's shape (as Communicator.all_reduce asks, so that a compiled call
is refused where the eager one is). The other shapes are the C calls' (yali.h), flat:
all_gather_into_tensor's output holds nranks x input.numel() elements, rank i's input at element
i * input.numel(); reduce_scatter_tensor's input
holds nranks x output.numel(); gather's output (nranks x input.numel(), on root; on other ranks a
0-element tensor, not looked at) and scatter's input (nranks x output.numel(), on root; elsewhere 0
elements, not looked at); all_to_all_single's output and input have the same number of elements,
a multiple of nranks. The functional forms return all_gather: (nranks * d0, *rest),
reduce_scatter: (d0 / nranks, *rest), all_to_all: the input's shape. The uneven exchange counts
rows (dim 0): split sizes in rows (all_to_all_v), int64 count tensors in rows on the comm's GPU.

Failures, and CUDA graphs. A failure seen on the device (a peer that did not arrive within
YALI_TIMEOUT_MS, a peer's abort, ranks that disagree about registered buffers) becomes the comm's
asynchronous error, on every rank (a rank that took no part in the failed call learns of it at its
next launch, whose output is then not to be trusted). From then on every eager call raises it
before launching anything: YaliTimeout, YaliRemoteError or YaliInvalidUsage, with the library's
message; the comm can only be aborted (``abort()``). A CUDA graph replay never passes through the
host API, so nothing raises there: the YALI collectives of a replay that runs after the failure
write NaN (all-ones bytes) into their outputs. The uneven exchange adds one failure of its own,
checked on the device: counts that do not fit (a capacity exceeded, a negative count, split sizes
that disagree between ranks) write nothing, leave -1 in the failing rank's count outputs and fail
the comm on every rank with YaliInvalidUsage. After replaying a graph that contains YALI
collectives, call ``comm.check_async_error()`` (alias ``comm.check()``; a host-memory read, about
1 us, no synchronization) once the replay's work has finished (after a synchronization, such as
``loss.item()``) and before trusting its outputs (stepping the optimizer on the gradients, saving a
checkpoint); a check made before that finish sees only failures of earlier work. Or let
``replay(graph, comm, synchronize=True)`` do both::

    graph.replay()
    loss_value = static_loss.item()  # waits for the replay
    comm.check()                     # raises YaliTimeout/YaliRemoteError/... if a collective failed

The same holds for graphs torch replays on its own: ``torch.compile(mode="reduce-overhead")``
(CUDA-graph trees) replays the compiled step's YALI collectives, once its warm-up runs are over,
without passing through YALI's host API, and so does a ``torch.cuda.CUDAGraph.replay()`` called
directly. Nothing in the compiled step checks (no check is put into the graph: a host read there
would run when the graph is recorded, not at its replays). After each step's outputs have reached
the host, call ``comm.check()``, or ``yali.torch.check_all()`` (every live comm of this process,
the same exception types), before trusting them (stepping the optimizer, saving a checkpoint)::

    loss = compiled_step(batch)          # torch.compile(step, mode="reduce-overhead")
    loss_value = loss.item()             # waits for the step
    yali.torch.check_all()               # raises if a YALI collective of the step failed
    optimizer.step()

Groups. Inside ``with yali.group():`` (yaliGroupStart/End) a collective is only queued: it is
launched at the outermost group end, so its output is not written before then. So are send and recv:
a comm's point-to-point calls of one group run in one launch, every transfer progressing at once,
which is how a rank's sends and receives that must progress together are made (a ring shift, a
pipeline exchange; outside a group a send larger than the rings waits for its receive), and the only way to send to
this rank itself. The forms that do work of their own after their collective would do it too early,
and are refused inside a group (YaliInvalidUsage, naming the call, before anything is queued):
gather and scatter with a list (pass the one-tensor form), all_to_all_device_counts with
output_offsets, and, nested in a group, SingleProcessCommunicator calls on ranks that share a GPU. A
group in which a call raised a YaliError launches none of its calls (NCCL's rule: yali.group_start),
so a SingleProcessCommunicator call refused on one GPU launches on none; this module's TypeError and
ValueError argument checks do not fail a group (a `with yali.group()` block they leave still drops
it). The group holds every tensor of its calls until its outermost end, as ProcessGroupNCCL's
coalescing does, so a temporary passed to a call and dropped at once
(``all_reduce_functional(g.to(torch.bfloat16))``) keeps its memory until the launch is queued.

Conjugate and negative views (``x.conj()`` of a complex tensor) are refused, as torch.distributed
refuses them: their memory holds the values before the view's bit is applied; pass
``x.resolve_conj()``.

This module is ``yali.torch``; the ``import torch`` below is an absolute import and gets PyTorch.
"""

import math
import operator
import warnings
from typing import List, Optional

try:
    import torch
    import torch.distributed as dist
except ImportError as _e:  # pragma: no cover - exercised by tests/python/test_capi_host.py
    raise ImportError(
        "yali.torch needs PyTorch (torch >= 2.4), which could not be imported: "
        f"{_e}. Install it (e.g. pip install 'yali[torch]'), or use the torch-free API in `yali`."
    ) from _e

if not (hasattr(torch, "library") and hasattr(torch.library, "custom_op")
        and hasattr(torch.library, "register_fake")):
    raise ImportError(
        f"yali.torch needs torch >= 2.4 (torch.library.custom_op); found torch {torch.__version__}"
    )

import yali
from yali import _capi
from yali._capi import Collective, DataType, RedOp

try:  # data_ptr() of a fake tensor (tracing, FakeTensorMode) is not an address: skip pointer checks
    from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
except ImportError:  # pragma: no cover
    _FakeTensor = ()

__all__ = ["Communicator", "SingleProcessCommunicator", "DTYPES", "OPS", "check_all", "replay"]

# torch dtype -> yaliDataType_t value: every torch dtype with an NCCL type. torch.float8_e4m3fn is
# the OCP E4M3 type NCCL calls ncclFloat8e4m3 (the *fnuz variants are other formats: not mapped).
DTYPES = {
    torch.int8: int(DataType.Int8),
    torch.uint8: int(DataType.Uint8),
    torch.int32: int(DataType.Int32),
    torch.int64: int(DataType.Int64),
    torch.float16: int(DataType.Float16),
    torch.float32: int(DataType.Float32),
    torch.float64: int(DataType.Float64),
    torch.bfloat16: int(DataType.Bfloat16),
}
for _name, _value in (("uint32", DataType.Uint32), ("uint64", DataType.Uint64),
                      ("float8_e4m3fn", DataType.Float8e4m3), ("float8_e5m2", DataType.Float8e5m2)):
    if isinstance(getattr(torch, _name, None), torch.dtype):  # uint32/uint64: torch >= 2.3
        DTYPES[getattr(torch, _name)] = int(_value)
# torch dtype -> (yaliDataType_t value it travels as, its elements per element of the dtype):
# DTYPES, and the dtypes torch.distributed's NCCL backend moves as another type: bool as uint8
# (ncclUint8), complex as its torch.view_as_real (the real type, twice the elements). Reductions on
# them: _check_op_dtype.
_WIRE = {d: (c, 1) for d, c in DTYPES.items()}
_WIRE[torch.bool] = (int(DataType.Uint8), 1)
_COMPLEX = {torch.complex64: int(DataType.Float32), torch.complex128: int(DataType.Float64)}
if isinstance(getattr(torch, "complex32", None), torch.dtype):  # chalf: view_as_real is float16
    _COMPLEX[torch.complex32] = int(DataType.Float16)
for _d, _c in _COMPLEX.items():
    _WIRE[_d] = (_c, 2)
_COMPLEX = frozenset(_COMPLEX)
_DTYPE_TUPLE = tuple(_WIRE)
_DTYPE_TEXT = ", ".join(str(d).replace("torch.", "") for d in _WIRE)
# The dtypes op="avg" accepts.
_FLOATING = frozenset(d for d, v in DTYPES.items() if DataType(v) in _capi.FLOATING_TYPES)

# op name -> yaliRedOp_t value.
OPS = {"sum": int(RedOp.Sum), "prod": int(RedOp.Prod), "max": int(RedOp.Max),
       "min": int(RedOp.Min), "avg": int(RedOp.Avg)}
_OP_ALIASES = {"product": int(RedOp.Prod), "mean": int(RedOp.Avg)}
_TORCH_OPS = (("SUM", RedOp.Sum), ("PRODUCT", RedOp.Prod), ("MAX", RedOp.Max),
              ("MIN", RedOp.Min), ("AVG", RedOp.Avg))

_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
if _is_compiling is None:  # pragma: no cover (torch 2.4 has it; kept for safety)
    _is_compiling = torch._dynamo.is_compiling


def _op_code(op, method):
    """yaliRedOp_t value of ``op``: "sum"/"prod"/"max"/"min"/"avg", a yali.RedOp, or
    torch.distributed.ReduceOp.SUM/PRODUCT/MAX/MIN/AVG. Never a plain int: torch.distributed and
    yali number the ops differently (int(ReduceOp.MAX) is 4, yali's Avg), so 4 could mean
    either."""
    if isinstance(op, str):
        code = OPS.get(op.lower(), _OP_ALIASES.get(op.lower()))
    elif isinstance(op, RedOp):
        # Compared as an int: torch.compile does not trace < on the enum itself.
        code = int(op) if 0 <= int(op) < int(RedOp.NumOps) else None
    elif isinstance(op, int):  # bool too
        raise TypeError(
            f"{method}: op={op!r} is a plain int, which torch.distributed and yali number "
            "differently (int(torch.distributed.ReduceOp.MAX) is 4, yali.RedOp.Avg); pass a name "
            "('sum', 'prod', 'max', 'min', 'avg'), a yali.RedOp or a torch.distributed.ReduceOp"
        )
    else:
        code = _torch_op_code(op)
    if code is None:
        raise ValueError(
            f"{method}: op={op!r} is not supported; use 'sum', 'prod', 'max', 'min', 'avg', a "
            "yali.RedOp or torch.distributed.ReduceOp.SUM/PRODUCT/MAX/MIN/AVG"
        )
    return code


def _torch_op_code(op):
    """yaliRedOp_t value of a torch.distributed.ReduceOp, or None."""
    members = [(getattr(dist.ReduceOp, name, None), value) for name, value in _TORCH_OPS]
    # Identity first: torch.compile traces `is`, but == on these pybind11 enums breaks the graph
    # (fullgraph=True fails). The members are singletons, so `is` finds every one of them.
    for member, value in members:
        if member is not None and op is member:
            return int(value)
    # torch.distributed.ReduceOp(ReduceOp.SUM) is an object of its own that compares equal to
    # the member it wraps (eager only). Nothing else is compared: the members also equal torch's
    # numbers (2.0 == ReduceOp.PRODUCT), which are not yali's.
    if isinstance(op, dist.ReduceOp):
        for member, value in members:
            if member is not None and op == member:
                return int(value)
    return None


_OP_NAMES = {v: k for k, v in OPS.items()}


def _check_op_dtype(method, code, dtype, name="tensor"):
    """The yaliRedOp_t value to run op ``code`` on ``dtype`` with, or an error before anything is
    launched. As torch.distributed's NCCL backend: bool runs on uint8, sum as max (a logical or)
    and avg refused; prod runs as min (a logical and: the same result as torch's product of 0s and
    1s, and no wrap-around on other bytes). Complex runs on its real view: sum and avg only (max,
    min and prod would act on the real and imaginary parts apart). avg on an integer dtype is
    refused, as the library would refuse it (it has no integer average). Reads only the dtype, so
    it runs under torch.compile too."""
    if dtype == torch.bool:
        if code == int(RedOp.Avg):
            raise ValueError(
                f"{method}: op=avg is not supported on torch.bool ({name} has dtype torch.bool; "
                "torch.distributed refuses it too); use op='sum' (a logical or) on a float copy"
            )
        if code == int(RedOp.Sum):
            return int(RedOp.Max)
        if code == int(RedOp.Prod):
            return int(RedOp.Min)
        return code
    if dtype in _COMPLEX:
        if code != int(RedOp.Sum) and code != int(RedOp.Avg):
            raise ValueError(
                f"{method}: op={_OP_NAMES.get(code, code)} is not supported on complex tensors "
                f"({name} has dtype {dtype}); only sum and avg are, as in torch.distributed "
                "(max, min and prod would act on the real and imaginary parts apart)"
            )
        return code
    if code == int(RedOp.Avg) and dtype not in _FLOATING:
        raise ValueError(
            f"{method}: op=avg is for floating dtypes only; {name} has dtype {dtype} (use op='sum' "
            "and divide)"
        )
    return code


def _device_index(device, method):
    """A CUDA device ordinal from an int, "cuda:1" or a torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"{method}: device must be a CUDA device, got {device!r}")
    return d.index if d.index is not None else torch.cuda.current_device()


def _check_resolved(method, name, t):
    """Refuses a lazy view whose memory does not hold its values: a conjugate view (``x.conj()`` of
    a complex tensor) or a negative view keeps the original bytes and a bit that torch applies
    when it reads them, and the library moves and reduces the bytes (torch.distributed refuses
    them too)."""
    if t.is_conj():
        raise ValueError(
            f"{method}: {name} is a conjugate view (x.conj()), whose memory holds the values before "
            f"conjugation; pass {name}.resolve_conj()"
        )
    if t.is_neg():
        raise ValueError(
            f"{method}: {name} is a negative view, whose memory holds the values before negation; "
            f"pass {name}.resolve_neg()"
        )


def _check_tensor(method, name, t, device_index):
    """The checks every collective argument passes; errors name the method and the argument."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{method}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(f"{method}: {name} must be a CUDA tensor, got one on {t.device}")
    if device_index is not None and t.device.index != device_index:
        raise ValueError(
            f"{method}: {name} is on {t.device} but the communicator is on cuda:{device_index}"
        )
    if t.dtype not in _DTYPE_TUPLE:
        raise TypeError(f"{method}: {name} has dtype {t.dtype}; supported: {_DTYPE_TEXT}")
    if not t.is_contiguous():
        raise ValueError(
            f"{method}: {name} must be contiguous (got shape {tuple(t.shape)}, strides "
            f"{t.stride()}); pass t.contiguous()"
        )
    _check_resolved(method, name, t)


def _has_memory(t):
    """Whether data_ptr() is a real address (not a fake or meta tensor being traced)."""
    return not isinstance(t, _FakeTensor) and t.device.type != "meta"


def _overlaps(a_ptr, a_bytes, b_ptr, b_bytes):
    """Whether the byte ranges [a_ptr, a_ptr + a_bytes) and [b_ptr, b_ptr + b_bytes) share a byte."""
    return a_bytes > 0 and b_bytes > 0 and a_ptr < b_ptr + b_bytes and b_ptr < a_ptr + a_bytes


def _check_overlap(method, a_name, a, b_name, b, in_place_at=None, in_place_hint=""):
    """Refuses ``b`` sharing memory with ``a``, except, where the collective has an in-place form,
    ``b`` starting exactly at element ``in_place_at`` of ``a`` (the library refuses every other
    overlap, as NCCL does; this says so before anything is launched, naming the arguments)."""
    if not (_has_memory(a) and _has_memory(b)):
        return
    a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
    a_bytes, b_bytes = a.numel() * a.element_size(), b.numel() * b.element_size()
    if not _overlaps(a_ptr, a_bytes, b_ptr, b_bytes):
        return
    if (in_place_at is not None and b_ptr == a_ptr + in_place_at * a.element_size()
            and b_ptr + b_bytes <= a_ptr + a_bytes):
        return
    raise ValueError(
        f"{method}: {b_name} overlaps {a_name}"
        + (f"; in place, {b_name} must be {in_place_hint}" if in_place_hint else "")
        + "; otherwise use disjoint memory"
    )


def _check_like(method, name, t, ref, ref_name, numel, numel_text):
    """``t``: a contiguous tensor of ``ref``'s dtype and device with ``numel`` elements."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{method}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != ref.dtype:
        raise TypeError(
            f"{method}: {name} has dtype {t.dtype}, {ref_name} has {ref.dtype}; they must match"
        )
    if t.device != ref.device:
        raise ValueError(
            f"{method}: {name} is on {t.device}, {ref_name} on {ref.device}; they must match"
        )
    if not t.is_contiguous():
        raise ValueError(
            f"{method}: {name} must be contiguous (got shape {tuple(t.shape)}, strides "
            f"{t.stride()})"
        )
    _check_resolved(method, name, t)
    if t.numel() != numel:
        raise ValueError(
            f"{method}: {name} has {t.numel()} elements (shape {tuple(t.shape)}); it must have "
            f"{numel_text} = {numel}"
        )


def _check_out(method, tensor, out, out_name="out", tensor_name="tensor"):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{method}: {out_name} must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != tensor.shape:
        raise ValueError(
            f"{method}: {out_name} has shape {tuple(out.shape)}, {tensor_name} has "
            f"{tuple(tensor.shape)}; they must match"
        )
    if out.dtype != tensor.dtype:
        raise TypeError(
            f"{method}: {out_name} has dtype {out.dtype}, {tensor_name} has {tensor.dtype}; "
            "they must match"
        )
    if out.device != tensor.device:
        raise ValueError(
            f"{method}: {out_name} is on {out.device}, {tensor_name} on {tensor.device}; "
            "they must match"
        )
    if not out.is_contiguous():
        raise ValueError(f"{method}: {out_name} must be contiguous")
    _check_resolved(method, out_name, out)
    if _has_memory(out) and _has_memory(tensor) and out.numel() and \
            out.data_ptr() != tensor.data_ptr():
        a, b = tensor.data_ptr(), out.data_ptr()
        nbytes = tensor.numel() * tensor.element_size()
        if _overlaps(a, nbytes, b, nbytes):
            raise ValueError(
                f"{method}: {out_name} partly overlaps {tensor_name}; use the same tensor "
                "(in place) or disjoint memory"
            )


def _check_rows(method, name, t, nranks):
    """A tensor split into nranks equal blocks along dim 0 (reduce_scatter's and all_to_all's)."""
    if t.dim() == 0 or t.shape[0] % nranks:
        raise ValueError(
            f"{method}: {name} has shape {tuple(t.shape)}; its first dimension must be a multiple "
            f"of the world size ({nranks})"
        )


def _as_count(value):
    """A row count as an int (anything with __index__ but bool), or a SymInt left as it is (the
    fake implementations under torch.compile); None when it is neither."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_splits(method, name, splits, t, nranks):
    """all_to_all_single's split sizes of ``t``, in rows (dim 0), as torch.distributed takes them:
    None, the even split (t.shape[0] a multiple of nranks), or nranks ints >= 0 summing to
    t.shape[0]. Returns the list."""
    if t.dim() == 0:
        raise ValueError(f"{method}: {_tensor_name(name)} is 0-d; split sizes count rows along "
                         "dim 0")
    rows = t.shape[0]
    if splits is None:
        if rows % nranks:
            raise ValueError(
                f"{method}: {name}=None splits {_tensor_name(name)} evenly, but its first "
                f"dimension ({rows}) is not a multiple of the world size ({nranks})"
            )
        return [rows // nranks] * nranks
    if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
        raise TypeError(f"{method}: {name} must be None or a list of ints, got {splits!r}")
    sizes = [_as_count(s) for s in splits]
    if any(s is None for s in sizes):
        raise TypeError(f"{method}: {name} must be None or a list of ints, got {splits!r}")
    if len(sizes) != nranks or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise ValueError(
            f"{method}: {name}={sizes} must have one entry per rank ({nranks}), each >= 0, summing "
            f"to the first dimension of {_tensor_name(name)} ({rows})"
        )
    return sizes


def _tensor_name(split_name):
    """The tensor a split-size argument describes: input_split_sizes -> input, ..."""
    return split_name.split("_split")[0]


def _packed(counts):
    """The displacements of ``counts`` packed one after the other (their exclusive prefix sums)."""
    displs, at = [], 0
    for c in counts:
        displs.append(at)
        at += c
    return displs


def _check_experts(method, local_experts, align, nranks=None):
    """expert_dispatch/expert_combine's integers, within yali.h's limits: 1 <= local_experts <=
    MAX_LOCAL_EXPERTS, nranks * local_experts <= MAX_EXPERTS (when nranks is known), align >= 1."""
    for name, value in (("local_experts", local_experts), ("align", align)):
        if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
            raise TypeError(f"{method}: {name} must be an int, got {type(value).__name__}")
    if not 1 <= local_experts <= _capi.MAX_LOCAL_EXPERTS:
        raise ValueError(f"{method}: local_experts={local_experts} must be in "
                         f"1..{_capi.MAX_LOCAL_EXPERTS} (YALI_MAX_LOCAL_EXPERTS)")
    if nranks is not None and nranks * local_experts > _capi.MAX_EXPERTS:
        raise ValueError(
            f"{method}: local_experts={local_experts} x world_size ({nranks}) = "
            f"{nranks * local_experts} experts; YALI takes at most {_capi.MAX_EXPERTS} "
            "(YALI_MAX_EXPERTS)"
        )
    if align < 1:
        raise ValueError(f"{method}: align={align} must be >= 1 (rows)")


def _require_tensors(method, named):
    """TypeError naming the first of ``named`` ((name, value), ...) that is not a tensor; None
    entries are optional arguments left out."""
    for name, t in named:
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{method}: {name} must be a torch.Tensor, got {type(t).__name__}")


def _check_exchange(where, output, input, device_index, names=("output", "input")):
    """The data tensors of the uneven exchange: rows along dim 0 of one shape (shape[1:]) and one
    dtype (any: YALI moves rows as bytes), contiguous, on the comm's GPU (``device_index``; None:
    not known). Returns (elements, bytes) of a row. Reads only what tensors, fake ones too, and
    the launch functions' stand-ins have."""
    out_name, in_name = names
    for name, t in ((in_name, input), (out_name, output)):
        if t.device.type != "cuda":
            raise ValueError(f"{where}: {name} must be a CUDA tensor, got one on {t.device}")
        if device_index is not None and t.device.index != device_index:
            raise ValueError(
                f"{where}: {name} is on {t.device} but the communicator is on cuda:{device_index}"
            )
        if not t.is_contiguous():
            raise ValueError(f"{where}: {name} must be contiguous; pass {name}.contiguous()")
        _check_resolved(where, name, t)
        if t.dim() == 0:
            raise ValueError(f"{where}: {name} is 0-d; the exchange moves rows along dim 0 "
                             f"(pass {name}.view(1))")
    if output.dtype != input.dtype:
        raise TypeError(f"{where}: {out_name} has dtype {output.dtype}, {in_name} has "
                        f"{input.dtype}; they must match")
    if tuple(output.shape[1:]) != tuple(input.shape[1:]):
        raise ValueError(
            f"{where}: {out_name} has rows of shape {tuple(output.shape[1:])}, {in_name} of "
            f"{tuple(input.shape[1:])}; they must match (shape[1:])"
        )
    row = math.prod(input.shape[1:])
    row_bytes = row * input.element_size()
    if row_bytes == 0:
        raise ValueError(f"{where}: {in_name} has rows of 0 elements (shape {tuple(input.shape)})")
    return row, row_bytes


def _check_count_overlaps(method, named):
    """The count tensors of one call ((name, tensor or None), ...) must not share memory: the
    outputs are written on the device while the inputs are read."""
    present = [(n, t) for n, t in named if t is not None]
    for i, (a_name, a) in enumerate(present):
        for b_name, b in present[i + 1:]:
            _check_overlap(method, a_name, a, b_name, b)


def _check_counts(where, name, t, length, length_text, device_index):
    """A count tensor of the uneven exchange: int64, contiguous, 1-d with ``length`` entries, on the
    comm's GPU (the library reads and writes it on the device). Reads only what tensors, fake ones
    too, and the launch functions' stand-ins have."""
    if t.dtype != torch.int64:
        raise TypeError(f"{where}: {name} must have dtype torch.int64, got {t.dtype}")
    if t.device.type != "cuda":
        raise ValueError(f"{where}: {name} must be a CUDA tensor (the counts are read and written "
                         f"on the device), got one on {t.device}")
    if device_index is not None and t.device.index != device_index:
        raise ValueError(
            f"{where}: {name} is on {t.device} but the communicator is on cuda:{device_index}"
        )
    if t.dim() != 1 or t.shape[0] != length:
        raise ValueError(f"{where}: {name} has shape {tuple(t.shape)}; it must be ({length},): "
                         f"{length_text}")
    if not t.is_contiguous():
        raise ValueError(f"{where}: {name} must be contiguous")


# yaliDataType_t values of 8, 4, 2 and 1 bytes. The uneven exchange moves bytes, so a dtype YALI has
# no type for (bool, int16, complex64, ...) travels as the widest of these that divides its size.
_BYTE_TYPES = ((8, int(DataType.Int64)), (4, int(DataType.Int32)), (2, int(DataType.Float16)),
               (1, int(DataType.Uint8)))


def _moved_type(dtype, element_size):
    """(yaliDataType_t value, its elements per element of ``dtype``) for yaliAlltoAllv."""
    code = DTYPES.get(dtype)
    if code is not None:
        return code, 1
    for size, code in _BYTE_TYPES:
        if element_size % size == 0:
            return code, element_size // size
    raise TypeError(f"dtype {dtype} has elements of {element_size} bytes")  # pragma: no cover


def _as_rank(method, name, value, nranks):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{method}: {name} must be an int, got {type(value).__name__}")
    if not 0 <= value < nranks:
        raise ValueError(f"{method}: {name}={value} is not a rank of this communicator "
                         f"(0..{nranks - 1})")
    return value


def _refuse_in_group(method, what, why):
    """Refuses a form that does work of its own after its collective (a copy out of an internal
    buffer, an offsets computation, a stream join) while this thread has a yali.group() open: the
    collective is then only queued, launched at the outermost group end, so that work would run
    before it. Raised before anything is queued."""
    if yali._group_depth():
        raise _capi.python_error(yali.Result.InvalidUsage, method,
                                 f"{what} is refused inside yali.group(): {why}")


_ONE_TENSOR = "pass one tensor of world_size x tensor.numel() elements, or call it outside the group"


def _refuse_gather_list_in_group(method):
    _refuse_in_group(method, "gather_list as a list of tensors",
                     "the data is copied into the list after the gather, which inside a group is "
                     f"launched only at the outermost group end; {_ONE_TENSOR}")


def _refuse_scatter_list_in_group(method):
    _refuse_in_group(method, "scatter_list as a list of tensors",
                     "the list is copied into an internal buffer, freed when the call returns, "
                     "before the scatter that reads it is launched at the outermost group end; "
                     + _ONE_TENSOR)


# ---- Live communicators, by handle (what the custom ops receive) --------------------------------

# handle -> yali.Comm. Lets the operators turn an int back into a comm, refuse a closed one instead
# of passing a dangling pointer to C, and lets fake implementations check the device.
_LIVE = {}


def _live_comm(opname, handle):
    comm = _LIVE.get(handle)
    if comm is None:
        raise _capi.python_error(
            yali.Result.InvalidUsage,
            opname,
            f"comm={handle:#x} is not a live YALI communicator (closed, or never created here)",
        )
    return comm


def _dtype_code(opname, name, t):
    """(yaliDataType_t value, elements of it per element of t) that ``t`` travels as."""
    wire = _WIRE.get(t.dtype)
    if wire is None:
        raise TypeError(f"{opname}: {name} has dtype {t.dtype}; supported: {_DTYPE_TEXT}")
    return wire


# ---- Custom operators ----------------------------------------------------------------------------


def _same_shape(tensor, comm):
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _launch_all_reduce(opname, handle, src, dst, op):
    comm = _live_comm(opname, handle)
    op = _check_op_dtype(opname, op, src.dtype)
    if src.device.type != "cuda" or src.device.index != comm.device:
        raise ValueError(f"{opname}: tensor is on {src.device}, the comm on cuda:{comm.device}")
    if not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError(f"{opname}: tensors must be contiguous")
    _check_resolved(opname, "tensor", src)
    _check_resolved(opname, "out", dst)
    if dst is not src and (dst.shape != src.shape or dst.dtype != src.dtype
                           or dst.device != src.device):
        raise ValueError(f"{opname}: out ({tuple(dst.shape)} {dst.dtype} {dst.device}) does not "
                         f"match tensor ({tuple(src.shape)} {src.dtype} {src.device})")
    stream = torch.cuda.current_stream(src.device).cuda_stream
    # yaliAllReduce reads the comm's asynchronous error (a host-mapped word) before anything else is
    # done: a failed comm raises here (YaliTimeout, YaliRemoteError, ...) with the library's message
    # and nothing is launched, so no separate check is needed on this path.
    code, per = _dtype_code(opname, "tensor", src)
    _capi.keep_for_group((src, dst))
    _capi.all_reduce(src.data_ptr(), dst.data_ptr(), src.numel() * per, code, op, handle, stream)


# torch before 2.10 ignores has_side_effect where it matters (below: the operators' registration),
# so a compiled graph may drop a call whose output this rank never reads, and the peers then time
# out. The fake implementations (which only tracing runs) say so once per process.
_OLD_TORCH_COMPILE = torch.torch_version.TorchVersion(torch.__version__) < "2.10"
_warned_old_compile = False


def _warn_old_compile(opname):
    global _warned_old_compile
    if _OLD_TORCH_COMPILE and not _warned_old_compile:
        _warned_old_compile = True
        warnings.warn(
            f"{opname} traced under torch {torch.__version__}: before torch 2.10, torch.compile may "
            "drop a YALI collective whose output this rank never reads (reduce off the destination, "
            "gather off the root, an unused result), and the other ranks then fail with YaliTimeout; "
            "keep such calls out of the compiled region (torch.compiler.disable) or use torch >= 2.10",
            RuntimeWarning, stacklevel=3)


def _fake_check(opname, handle, t, name="tensor"):
    _warn_old_compile(opname)
    comm = _LIVE.get(handle) if isinstance(handle, int) else None
    _check_tensor(opname, name, t, comm.device if comm is not None else None)


class _CollectiveOps:
    """The three operators of one collective (see the module docstring)."""

    def __init__(self, inplace, out, functional):
        self.inplace = inplace
        self.out = out
        self.functional = functional


def _define_collective(name, launch, out_like):
    """Registers yali::<name>_, yali::<name>_out and yali::<name> over ``launch(opname, comm, src,
    dst, op)``; ``out_like(tensor, comm)`` allocates the functional form's result (and is its fake).
    Adding a collective: a C wrapper in _capi, a launch function, one call here, one method."""
    qual = f"yali::{name}"

    @torch.library.custom_op(qual + "_", mutates_args=("tensor",), device_types="cuda")
    def inplace(tensor: torch.Tensor, comm: int, op: int) -> None:
        launch(qual + "_", comm, tensor, tensor, op)

    @inplace.register_fake
    def _inplace_fake(tensor, comm, op):
        _fake_check(qual + "_", comm, tensor)
        _check_op_dtype(qual + "_", op, tensor.dtype)

    @torch.library.custom_op(qual + "_out", mutates_args=("out",), device_types="cuda")
    def out_variant(tensor: torch.Tensor, out: torch.Tensor, comm: int, op: int) -> None:
        launch(qual + "_out", comm, tensor, out, op)

    @out_variant.register_fake
    def _out_fake(tensor, out, comm, op):
        _fake_check(qual + "_out", comm, tensor)
        _fake_check(qual + "_out", comm, out, "out")
        _check_out(qual + "_out", tensor, out)  # what the method checks eagerly: shape included
        _check_op_dtype(qual + "_out", op, tensor.dtype)

    @torch.library.custom_op(qual, mutates_args=(), device_types="cuda")
    def functional(tensor: torch.Tensor, comm: int, op: int) -> torch.Tensor:
        result = out_like(tensor, comm)
        launch(qual, comm, tensor, result, op)
        return result

    @functional.register_fake
    def _functional_fake(tensor, comm, op):
        _fake_check(qual, comm, tensor)
        _check_op_dtype(qual, op, tensor.dtype)
        return out_like(tensor, comm)

    ns = torch.ops.yali
    return _CollectiveOps(
        getattr(ns, name + "_").default, getattr(ns, name + "_out").default, getattr(ns, name).default
    )


_all_reduce_ops = _define_collective("all_reduce", _launch_all_reduce, _same_shape)


# ---- Custom operators of the other collectives ---------------------------------------------------
#
# One launch function per collective, called by its operators with real tensors. It re-checks what
# the C call needs (live comm, device, contiguity, dtype, element counts) because the operators can
# be called directly (torch.ops.yali.*) and because the methods skip their checks while torch.compile
# traces; the library itself refuses overlapping buffers and bad roots.


def _launch_prep(opname, handle, named):
    """(comm, (dtype code, its elements per element), stream) for a launch on ``named`` =
    ((name, tensor), ...), the first one giving the dtype: every tensor contiguous, on the comm's GPU, of that dtype."""
    comm = _live_comm(opname, handle)
    first_name, first = named[0]
    for name, t in named:
        if t.device.type != "cuda" or t.device.index != comm.device:
            raise ValueError(f"{opname}: {name} is on {t.device}, the comm on cuda:{comm.device}")
        if not t.is_contiguous():
            raise ValueError(f"{opname}: {name} must be contiguous")
        _check_resolved(opname, name, t)
        if t.dtype != first.dtype:
            raise TypeError(f"{opname}: {name} has dtype {t.dtype}, {first_name} has {first.dtype}; "
                            "they must match")
    code = _dtype_code(opname, first_name, first)
    _capi.keep_for_group(t for _, t in named)
    return comm, code, torch.cuda.current_stream(first.device).cuda_stream


def _expect_numel(opname, name, t, numel, text):
    if t.numel() != numel:
        raise ValueError(f"{opname}: {name} has {t.numel()} elements; it must have {text} = {numel}")


def _launch_root(opname, comm, root):
    return _as_rank(opname, "root", root, comm.size)


def _launch_all_gather(opname, handle, output, input):
    comm, (code, per), stream = _launch_prep(opname, handle, (("input", input), ("output", output)))
    count = input.numel()
    _expect_numel(opname, "output", output, comm.size * count,
                  f"nranks ({comm.size}) x input.numel() ({count})")
    _capi.all_gather(input.data_ptr(), output.data_ptr(), count * per, code, handle, stream)


def _launch_reduce_scatter(opname, handle, output, input, op):
    comm, (code, per), stream = _launch_prep(opname, handle, (("input", input), ("output", output)))
    op = _check_op_dtype(opname, op, input.dtype, "input")
    count = output.numel()
    _expect_numel(opname, "input", input, comm.size * count,
                  f"nranks ({comm.size}) x output.numel() ({count})")
    _capi.reduce_scatter(input.data_ptr(), output.data_ptr(), count * per, code, op, handle, stream)


def _launch_broadcast(opname, handle, tensor, root):
    comm, (code, per), stream = _launch_prep(opname, handle, (("tensor", tensor),))
    root = _launch_root(opname, comm, root)
    ptr = tensor.data_ptr()
    _capi.broadcast(ptr, ptr, tensor.numel() * per, code, root, handle, stream)


def _launch_reduce(opname, handle, tensor, op, root):
    comm, (code, per), stream = _launch_prep(opname, handle, (("tensor", tensor),))
    op = _check_op_dtype(opname, op, tensor.dtype)
    root = _launch_root(opname, comm, root)
    # In place (send == recv); on the other ranks the library only reads the tensor.
    ptr = tensor.data_ptr()
    _capi.reduce(ptr, ptr, tensor.numel() * per, code, op, root, handle, stream)


def _launch_gather(opname, handle, output, input, root):
    comm, (code, per), stream = _launch_prep(opname, handle, (("input", input), ("output", output)))
    root = _launch_root(opname, comm, root)
    count = input.numel()
    recv = None  # NULL off root: the library does not look at it there
    if comm.rank == root:
        _expect_numel(opname, "output", output, comm.size * count,
                      f"nranks ({comm.size}) x input.numel() ({count})")
        recv = output.data_ptr()
    _capi.gather(input.data_ptr(), recv, count * per, code, root, handle, stream)


def _launch_scatter(opname, handle, output, input, root):
    comm, (code, per), stream = _launch_prep(opname, handle, (("output", output), ("input", input)))
    root = _launch_root(opname, comm, root)
    count = output.numel()
    send = None  # NULL off root: the library does not look at it there
    if comm.rank == root:
        _expect_numel(opname, "input", input, comm.size * count,
                      f"nranks ({comm.size}) x output.numel() ({count})")
        send = input.data_ptr()
    _capi.scatter(send, output.data_ptr(), count * per, code, root, handle, stream)


def _launch_all_to_all(opname, handle, output, input):
    comm, (code, per), stream = _launch_prep(opname, handle, (("input", input), ("output", output)))
    n = input.numel()
    _expect_numel(opname, "output", output, n, "input.numel()")
    if n % comm.size:
        raise ValueError(f"{opname}: input has {n} elements, not a multiple of nranks ({comm.size})")
    _capi.all_to_all(input.data_ptr(), output.data_ptr(), n // comm.size * per, code, handle,
                     stream)


def _check_nranks(opname, handle, nranks):
    comm = _LIVE.get(handle) if isinstance(handle, int) else None
    if comm is not None and nranks != comm.size:
        raise ValueError(f"{opname}: nranks={nranks}, but the comm has {comm.size} ranks")


def _gathered_like(opname, input, nranks):
    """all_gather's result: (nranks * d0, *rest), or (nranks,) for a 0-d input."""
    if nranks < 1:
        raise ValueError(f"{opname}: nranks={nranks} must be >= 1")
    shape = (nranks,) if input.dim() == 0 else (nranks * input.shape[0], *input.shape[1:])
    return input.new_empty(shape)


def _scattered_like(opname, input, nranks):
    """reduce_scatter's result: (d0 / nranks, *rest)."""
    if nranks < 1:
        raise ValueError(f"{opname}: nranks={nranks} must be >= 1")
    _check_rows(opname, "input", input, nranks)
    return input.new_empty((input.shape[0] // nranks, *input.shape[1:]))


def _fake_prep(opname, handle, named):
    """The fake implementations' checks (device, dtype, contiguity; the dtypes agree); returns
    the live comm when the handle names one, else None."""
    _warn_old_compile(opname)
    comm = _LIVE.get(handle) if isinstance(handle, int) else None
    first_name, first = named[0]
    for name, t in named:
        _check_tensor(opname, name, t, comm.device if comm is not None else None)
        if t.dtype != first.dtype:
            raise TypeError(f"{opname}: {name} has dtype {t.dtype}, {first_name} has {first.dtype}; "
                            "they must match")
    return comm


@torch.library.custom_op("yali::all_gather_into_tensor", mutates_args=("output",),
                         device_types="cuda")
def _all_gather_into_tensor_op(output: torch.Tensor, input: torch.Tensor, comm: int) -> None:
    _launch_all_gather("yali::all_gather_into_tensor", comm, output, input)


@_all_gather_into_tensor_op.register_fake
def _(output, input, comm):
    opname = "yali::all_gather_into_tensor"
    c = _fake_prep(opname, comm, (("input", input), ("output", output)))
    if c is not None:
        _expect_numel(opname, "output", output, c.size * input.numel(),
                      f"nranks ({c.size}) x input.numel()")


@torch.library.custom_op("yali::all_gather", mutates_args=(), device_types="cuda")
def _all_gather_op(input: torch.Tensor, comm: int, nranks: int) -> torch.Tensor:
    opname = "yali::all_gather"
    _check_nranks(opname, comm, nranks)
    output = _gathered_like(opname, input, nranks)
    _launch_all_gather(opname, comm, output, input)
    return output


@_all_gather_op.register_fake
def _(input, comm, nranks):
    opname = "yali::all_gather"
    _fake_prep(opname, comm, (("input", input),))
    _check_nranks(opname, comm, nranks)
    return _gathered_like(opname, input, nranks)


@torch.library.custom_op("yali::reduce_scatter_tensor", mutates_args=("output",),
                         device_types="cuda")
def _reduce_scatter_tensor_op(output: torch.Tensor, input: torch.Tensor, comm: int,
                              op: int) -> None:
    _launch_reduce_scatter("yali::reduce_scatter_tensor", comm, output, input, op)


@_reduce_scatter_tensor_op.register_fake
def _(output, input, comm, op):
    opname = "yali::reduce_scatter_tensor"
    c = _fake_prep(opname, comm, (("input", input), ("output", output)))
    _check_op_dtype(opname, op, input.dtype, "input")
    if c is not None:
        _expect_numel(opname, "input", input, c.size * output.numel(),
                      f"nranks ({c.size}) x output.numel()")


@torch.library.custom_op("yali::reduce_scatter", mutates_args=(), device_types="cuda")
def _reduce_scatter_op(input: torch.Tensor, comm: int, op: int, nranks: int) -> torch.Tensor:
    opname = "yali::reduce_scatter"
    _check_nranks(opname, comm, nranks)
    output = _scattered_like(opname, input, nranks)
    _launch_reduce_scatter(opname, comm, output, input, op)
    return output


@_reduce_scatter_op.register_fake
def _(input, comm, op, nranks):
    opname = "yali::reduce_scatter"
    _fake_prep(opname, comm, (("input", input),))
    _check_op_dtype(opname, op, input.dtype, "input")
    _check_nranks(opname, comm, nranks)
    return _scattered_like(opname, input, nranks)


@torch.library.custom_op("yali::broadcast_", mutates_args=("tensor",), device_types="cuda")
def _broadcast_op(tensor: torch.Tensor, comm: int, root: int) -> None:
    _launch_broadcast("yali::broadcast_", comm, tensor, root)


def _fake_one_tensor_rank(opname, comm, tensor, name, rank):
    """The fake of an operator on one tensor and one rank of the comm (``name``: "root", "peer"):
    the tensor and the rank checked as the real operator checks them."""
    c = _fake_prep(opname, comm, (("tensor", tensor),))
    if c is not None:
        _as_rank(opname, name, rank, c.size)


@_broadcast_op.register_fake
def _(tensor, comm, root):
    _fake_one_tensor_rank("yali::broadcast_", comm, tensor, "root", root)


@torch.library.custom_op("yali::reduce_", mutates_args=("tensor",), device_types="cuda")
def _reduce_op(tensor: torch.Tensor, comm: int, op: int, root: int) -> None:
    _launch_reduce("yali::reduce_", comm, tensor, op, root)


@_reduce_op.register_fake
def _(tensor, comm, op, root):
    opname = "yali::reduce_"
    c = _fake_prep(opname, comm, (("tensor", tensor),))
    _check_op_dtype(opname, op, tensor.dtype)
    if c is not None:
        _as_rank(opname, "root", root, c.size)


@torch.library.custom_op("yali::gather", mutates_args=("output",), device_types="cuda")
def _gather_op(output: torch.Tensor, input: torch.Tensor, comm: int, root: int) -> None:
    _launch_gather("yali::gather", comm, output, input, root)


@_gather_op.register_fake
def _(output, input, comm, root):
    opname = "yali::gather"
    c = _fake_prep(opname, comm, (("input", input), ("output", output)))
    if c is not None and _as_rank(opname, "root", root, c.size) == c.rank:
        _expect_numel(opname, "output", output, c.size * input.numel(),
                      f"nranks ({c.size}) x input.numel()")


@torch.library.custom_op("yali::scatter", mutates_args=("output",), device_types="cuda")
def _scatter_op(output: torch.Tensor, input: torch.Tensor, comm: int, root: int) -> None:
    _launch_scatter("yali::scatter", comm, output, input, root)


@_scatter_op.register_fake
def _(output, input, comm, root):
    opname = "yali::scatter"
    c = _fake_prep(opname, comm, (("output", output), ("input", input)))
    if c is not None and _as_rank(opname, "root", root, c.size) == c.rank:
        _expect_numel(opname, "input", input, c.size * output.numel(),
                      f"nranks ({c.size}) x output.numel()")


@torch.library.custom_op("yali::all_to_all_single", mutates_args=("output",), device_types="cuda")
def _all_to_all_single_op(output: torch.Tensor, input: torch.Tensor, comm: int) -> None:
    _launch_all_to_all("yali::all_to_all_single", comm, output, input)


@_all_to_all_single_op.register_fake
def _(output, input, comm):
    opname = "yali::all_to_all_single"
    _fake_prep(opname, comm, (("input", input), ("output", output)))
    _expect_numel(opname, "output", output, input.numel(), "input.numel()")


@torch.library.custom_op("yali::all_to_all", mutates_args=(), device_types="cuda")
def _all_to_all_op(input: torch.Tensor, comm: int) -> torch.Tensor:
    opname = "yali::all_to_all"
    _check_rows(opname, "input", input, _live_comm(opname, comm).size)
    output = torch.empty_like(input, memory_format=torch.contiguous_format)
    _launch_all_to_all(opname, comm, output, input)
    return output


@_all_to_all_op.register_fake
def _(input, comm):
    opname = "yali::all_to_all"
    c = _fake_prep(opname, comm, (("input", input),))
    if c is not None:
        _check_rows(opname, "input", input, c.size)
    return torch.empty_like(input, memory_format=torch.contiguous_format)


# ---- Custom operators of the point-to-point calls (yaliSend, yaliRecv) ---------------------------
#
# ``peer`` is a rank of the comm (the methods translate torch.distributed's global ranks). The
# tensor moves as its wire type (_WIRE: bool as uint8, complex as its real view); the library
# matches a send with its receive by bytes.


def _launch_p2p(opname, call, handle, tensor, peer):
    """yaliSend or yaliRecv (``call``: _capi.send or _capi.recv) of ``tensor`` with ``peer``."""
    comm, (code, per), stream = _launch_prep(opname, handle, (("tensor", tensor),))
    peer = _as_rank(opname, "peer", peer, comm.size)
    call(tensor.data_ptr(), tensor.numel() * per, code, peer, handle, stream)


def _launch_send(opname, handle, tensor, peer):
    _launch_p2p(opname, _capi.send, handle, tensor, peer)


def _launch_recv(opname, handle, tensor, peer):
    _launch_p2p(opname, _capi.recv, handle, tensor, peer)


@torch.library.custom_op("yali::send", mutates_args=(), device_types="cuda")
def _send_op(tensor: torch.Tensor, comm: int, peer: int) -> None:
    _launch_send("yali::send", comm, tensor, peer)


@_send_op.register_fake
def _(tensor, comm, peer):
    _fake_one_tensor_rank("yali::send", comm, tensor, "peer", peer)


@torch.library.custom_op("yali::recv_", mutates_args=("tensor",), device_types="cuda")
def _recv_op(tensor: torch.Tensor, comm: int, peer: int) -> None:
    _launch_recv("yali::recv_", comm, tensor, peer)


@_recv_op.register_fake
def _(tensor, comm, peer):
    _fake_one_tensor_rank("yali::recv_", comm, tensor, "peer", peer)


# ---- Custom operators of the uneven exchange (AlltoAllv) -----------------------------------------
#
# Rows along dim 0, any dtype, moved as bytes; never in place. all_to_all_v takes host split sizes
# (yaliAlltoAllv; a captured graph keeps them). The other three read their counts on the device
# (int64 tensors written by an earlier kernel on the stream), so a captured graph replays with
# whatever counts each step writes; all_to_all_device_counts is yaliExpertDispatch with one expert
# per rank, which packs the rows by source rank exactly as the device-count AlltoAllv does, in rows.


def _launch_rows(opname, handle, output, input):
    """(comm, elements per row, bytes per row, stream) of a launch of the uneven exchange."""
    comm = _live_comm(opname, handle)
    row, row_bytes = _check_exchange(opname, output, input, comm.device)
    _capi.keep_for_group((output, input))
    return comm, row, row_bytes, torch.cuda.current_stream(input.device).cuda_stream


def _ptr(t):
    return None if t is None else t.data_ptr()


def _launch_all_to_all_v(opname, handle, output, input, output_split_sizes, input_split_sizes):
    comm, row, _, stream = _launch_rows(opname, handle, output, input)
    send = _as_splits(opname, "input_split_sizes", input_split_sizes, input, comm.size)
    recv = _as_splits(opname, "output_split_sizes", output_split_sizes, output, comm.size)
    code, per_element = _moved_type(input.dtype, input.element_size())
    per_row = row * per_element
    send = [s * per_row for s in send]
    recv = [r * per_row for r in recv]
    _capi.all_to_all_v(input.data_ptr(), send, _packed(send), output.data_ptr(), recv,
                       _packed(recv), code, handle, stream, nranks=comm.size)


def _refuse_offsets_in_group(method):
    _refuse_in_group(method, "output_offsets",
                     "they are computed on the stream after the exchange, which inside a group is "
                     "launched only at the outermost group end; pass output_splits and take their "
                     "exclusive prefix sums after the group, or call it outside the group")


def _source_offsets(counts, offsets):
    """``offsets`` = where each source rank's rows start: the exclusive prefix sums of ``counts``,
    on the current stream (no host synchronization); -1 wherever ``counts`` holds the -1 of a
    failed count check, so that the flag survives."""
    torch.cumsum(counts, 0, out=offsets)
    offsets.sub_(counts)
    offsets.masked_fill_(counts < 0, -1)


def _launch_all_to_all_device_counts(opname, handle, output, input, input_splits, output_splits,
                                     output_offsets):
    if output_offsets is not None:
        _refuse_offsets_in_group(opname)
    comm, _, row_bytes, stream = _launch_rows(opname, handle, output, input)
    n = comm.size
    _check_counts(opname, "input_splits", input_splits, n, f"nranks ({n})", comm.device)
    for name, t in (("output_splits", output_splits), ("output_offsets", output_offsets)):
        if t is not None:
            _check_counts(opname, name, t, n, f"nranks ({n})", comm.device)
    counts = output_splits
    if counts is None and output_offsets is not None:
        counts = torch.empty(n, dtype=torch.int64, device=output_offsets.device)
    layout = _capi.expert_layout(row_bytes, 1, 1, output.shape[0], opname, n, input.shape[0])
    _capi.keep_for_group((input_splits, counts))
    _capi.expert_dispatch(input.data_ptr(), input_splits.data_ptr(), output.data_ptr(),
                          _ptr(counts), None, layout, handle, stream)
    if output_offsets is not None:
        _source_offsets(counts, output_offsets)


def _launch_expert_dispatch(opname, handle, output, input, send_counts, local_experts, align,
                            recv_counts, expert_offsets):
    comm, _, row_bytes, stream = _launch_rows(opname, handle, output, input)
    n, e = comm.size, local_experts
    _check_experts(opname, e, align, n)
    _check_counts(opname, "send_counts", send_counts, n * e, f"nranks ({n}) x local_experts ({e})",
                  comm.device)
    if recv_counts is not None:
        _check_counts(opname, "recv_counts", recv_counts, e * n,
                      f"local_experts ({e}) x nranks ({n})", comm.device)
    if expert_offsets is not None:
        _check_counts(opname, "expert_offsets", expert_offsets, e + 1,
                      f"local_experts ({e}) + 1", comm.device)
    layout = _capi.expert_layout(row_bytes, e, align, output.shape[0], opname, n, input.shape[0])
    _capi.keep_for_group((send_counts, recv_counts, expert_offsets))
    _capi.expert_dispatch(input.data_ptr(), send_counts.data_ptr(), output.data_ptr(),
                          _ptr(recv_counts), _ptr(expert_offsets), layout, handle, stream)


def _launch_expert_combine(opname, handle, output, input, send_counts, local_experts, align):
    comm, _, row_bytes, stream = _launch_rows(opname, handle, output, input)
    n, e = comm.size, local_experts
    _check_experts(opname, e, align, n)
    _check_counts(opname, "send_counts", send_counts, n * e, f"nranks ({n}) x local_experts ({e})",
                  comm.device)
    # The expert-major buffer is the combine's input: its rows are the capacity.
    layout = _capi.expert_layout(row_bytes, e, align, input.shape[0], opname, n, output.shape[0])
    _capi.keep_for_group((send_counts,))
    _capi.expert_combine(input.data_ptr(), send_counts.data_ptr(), output.data_ptr(), layout,
                         handle, stream)


def _fake_rows(opname, handle, output, input):
    """The fake implementations' checks of the data tensors; the live comm, or None."""
    _warn_old_compile(opname)
    comm = _LIVE.get(handle) if isinstance(handle, int) else None
    _check_exchange(opname, output, input, comm.device if comm is not None else None)
    return comm


@torch.library.custom_op("yali::all_to_all_v", mutates_args=("output",), device_types="cuda")
def _all_to_all_v_op(output: torch.Tensor, input: torch.Tensor, output_split_sizes: List[int],
                     input_split_sizes: List[int], comm: int) -> None:
    _launch_all_to_all_v("yali::all_to_all_v", comm, output, input, output_split_sizes,
                         input_split_sizes)


@_all_to_all_v_op.register_fake
def _(output, input, output_split_sizes, input_split_sizes, comm):
    opname = "yali::all_to_all_v"
    c = _fake_rows(opname, comm, output, input)
    n = c.size if c is not None else len(input_split_sizes)
    _as_splits(opname, "input_split_sizes", input_split_sizes, input, n)
    _as_splits(opname, "output_split_sizes", output_split_sizes, output, n)


@torch.library.custom_op("yali::all_to_all_device_counts",
                         mutates_args=("output", "output_splits", "output_offsets"),
                         device_types="cuda")
def _all_to_all_device_counts_op(output: torch.Tensor, input: torch.Tensor,
                                 input_splits: torch.Tensor, output_splits: Optional[torch.Tensor],
                                 output_offsets: Optional[torch.Tensor], comm: int) -> None:
    _launch_all_to_all_device_counts("yali::all_to_all_device_counts", comm, output, input,
                                     input_splits, output_splits, output_offsets)


@_all_to_all_device_counts_op.register_fake
def _(output, input, input_splits, output_splits, output_offsets, comm):
    opname = "yali::all_to_all_device_counts"
    c = _fake_rows(opname, comm, output, input)
    n = c.size if c is not None else input_splits.shape[0]
    dev = c.device if c is not None else None
    for name, t in (("input_splits", input_splits), ("output_splits", output_splits),
                    ("output_offsets", output_offsets)):
        if t is not None:
            _check_counts(opname, name, t, n, f"nranks ({n})", dev)


@torch.library.custom_op("yali::expert_dispatch",
                         mutates_args=("output", "recv_counts", "expert_offsets"),
                         device_types="cuda")
def _expert_dispatch_op(output: torch.Tensor, input: torch.Tensor, send_counts: torch.Tensor,
                        local_experts: int, align: int, recv_counts: Optional[torch.Tensor],
                        expert_offsets: Optional[torch.Tensor], comm: int) -> None:
    _launch_expert_dispatch("yali::expert_dispatch", comm, output, input, send_counts,
                            local_experts, align, recv_counts, expert_offsets)


@_expert_dispatch_op.register_fake
def _(output, input, send_counts, local_experts, align, recv_counts, expert_offsets, comm):
    opname = "yali::expert_dispatch"
    c = _fake_rows(opname, comm, output, input)
    n = c.size if c is not None else None
    _check_experts(opname, local_experts, align, n)
    if c is not None:
        e = local_experts
        _check_counts(opname, "send_counts", send_counts, n * e,
                      f"nranks ({n}) x local_experts ({e})", c.device)
        if recv_counts is not None:
            _check_counts(opname, "recv_counts", recv_counts, e * n,
                          f"local_experts ({e}) x nranks ({n})", c.device)
    if expert_offsets is not None:
        _check_counts(opname, "expert_offsets", expert_offsets, local_experts + 1,
                      f"local_experts ({local_experts}) + 1", c.device if c is not None else None)


@torch.library.custom_op("yali::expert_combine", mutates_args=("output",), device_types="cuda")
def _expert_combine_op(output: torch.Tensor, input: torch.Tensor, send_counts: torch.Tensor,
                       local_experts: int, align: int, comm: int) -> None:
    _launch_expert_combine("yali::expert_combine", comm, output, input, send_counts, local_experts,
                           align)


@_expert_combine_op.register_fake
def _(output, input, send_counts, local_experts, align, comm):
    opname = "yali::expert_combine"
    c = _fake_rows(opname, comm, output, input)
    _check_experts(opname, local_experts, align, c.size if c is not None else None)
    if c is not None:
        n, e = c.size, local_experts
        _check_counts(opname, "send_counts", send_counts, n * e,
                      f"nranks ({n}) x local_experts ({e})", c.device)


class _Ops:
    """The OpOverloads the methods call (a namespace, so that host tests can stand in for them)."""

    all_gather_into_tensor = torch.ops.yali.all_gather_into_tensor.default
    all_gather = torch.ops.yali.all_gather.default
    reduce_scatter_tensor = torch.ops.yali.reduce_scatter_tensor.default
    reduce_scatter = torch.ops.yali.reduce_scatter.default
    broadcast_ = torch.ops.yali.broadcast_.default
    reduce_ = torch.ops.yali.reduce_.default
    gather = torch.ops.yali.gather.default
    scatter = torch.ops.yali.scatter.default
    all_to_all_single = torch.ops.yali.all_to_all_single.default
    all_to_all = torch.ops.yali.all_to_all.default
    send = torch.ops.yali.send.default
    recv_ = torch.ops.yali.recv_.default
    all_to_all_v = torch.ops.yali.all_to_all_v.default
    all_to_all_device_counts = torch.ops.yali.all_to_all_device_counts.default
    expert_dispatch = torch.ops.yali.expert_dispatch.default
    expert_combine = torch.ops.yali.expert_combine.default


# Every operator is a collective: the other ranks wait for this rank's call, so a compiled graph must
# make it even where this rank never reads what it writes (reduce off the destination, gather off
# the root, whose output is a 0-element stand-in, a functional result left unused). To torch they
# look pure (the functional ones), or pure once functionalized (the others become
# auto_functionalized nodes whose outputs nothing reads), and aot_autograd's and inductor's dead-code
# elimination would drop them, leaving the peers to time out. has_side_effect marks them impure: fx
# keeps such nodes (auto_functionalized ones by the operator they wrap) and inductor's scheduler
# keeps a kernel whose operator is impure. Both of those hold from torch 2.10 on (read in torch's
# sources, 2.4 to 2.11; run on CPU with 2.4 and 2.11): before it, fx looked at an
# auto_functionalized node's own target only, so the forms that write an argument are still
# dropped, and inductor kept only kernels whose schema writes an argument, so the functional forms
# are dropped there. torch's compile caches do not key on this marking: a graph compiled and
# cached before it (TORCHINDUCTOR_CACHE_DIR) comes back without the calls until the cache is
# cleared.
#
# Ordered effects (torch.library._register_effectful_op(op, EffectType.ORDERED)), which thread a
# token through the graph so that no pass can reorder the calls, are not used: torch refuses them for
# operators that write an argument (with_effects: "Ops with aliasing is not supported"), so only
# the four functional forms would be ordered, and not against the others; the token becomes an
# input and an output of the compiled graph (a CPU tensor, which may keep mode="reduce-overhead"
# from capturing it; not tried on a GPU); and the registration is a private API. The calls stay in
# the graph in program order and torch's passes are deterministic, so ranks that trace the same
# graph issue the collectives in the same order. Graphs that differ between ranks (a Python branch
# on the rank around other work) are not covered: inductor may reorder independent kernels (for
# peak memory) differently in each.
for _op in (_all_reduce_ops.inplace, _all_reduce_ops.out, _all_reduce_ops.functional,
            *(v for v in vars(_Ops).values() if isinstance(v, torch._ops.OpOverload))):
    torch.fx.node.has_side_effect(_op)
del _op


# ---- Registered memory ---------------------------------------------------------------------------


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def _empty_on(shape, dtype, dev, method):
    if dtype not in _DTYPE_TUPLE:
        raise TypeError(f"{method}: dtype {dtype} is not supported; supported: {_DTYPE_TEXT}")
    return torch.empty(shape, dtype=dtype, device=torch.device("cuda", dev))


def _find_registration(regs, x, method):
    """The live Registration in ``regs`` that is ``x``, or that holds tensor ``x`` (for a list of
    tensors, x[0]): the one that starts at its storage, else one that contains its data."""
    if isinstance(x, yali.Registration):
        return x
    t = x[0] if isinstance(x, (list, tuple)) and x else x
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{method}: expected a tensor or a yali.Registration, got {type(x).__name__}")
    live = [r for r in regs if not r.closed]
    # Device pointers are unique across GPUs (unified addressing): any comm's range may match.
    storage = _storage_ptr(t)
    for r in live:
        if storage in r.ptrs:
            return r
    for r in live:
        if any(r.contains(t.data_ptr(), 1, i) for i in range(len(r.ptrs))):
            return r
    raise ValueError(f"{method}: this tensor's storage is not registered on this communicator")


def _info_ptr(t):
    """A tensor's data_ptr for yaliAlgoInfo; None (NULL) unless it is a CUDA tensor."""
    return t.data_ptr() if isinstance(t, torch.Tensor) and t.device.type == "cuda" else None


def _check_absent(method, name, value, role, root, rank):
    """Off the root, torch.distributed refuses a gather_list/scatter_list (None or [] only); a
    tensor there (the one-buffer form) is not looked at, as the C call ignores that buffer."""
    if value is None or isinstance(value, torch.Tensor):
        return
    if len(value):
        raise ValueError(
            f"{method}: {name} must be None or empty on ranks other than the {role} (this is rank "
            f"{rank}, the {role} is rank {root}), as in torch.distributed"
        )


def _check_list(method, name, value, tensor, nranks, role, checking=True):
    """The list form of gather_list/scatter_list on the root: world_size tensors, each with
    tensor.numel() elements of its dtype on its device. Returns it as a list."""
    if value is None:
        raise ValueError(f"{method}: {name} is required on the {role} rank (a list of "
                         f"world_size tensors, or one tensor of world_size x tensor.numel())")
    parts = list(value)
    if len(parts) != nranks:
        raise ValueError(f"{method}: {name} has {len(parts)} tensors; expected world_size "
                         f"({nranks})")
    if checking:
        for i, p in enumerate(parts):
            what = f"{name}[{i}]"
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"{method}: {what} must be a torch.Tensor, got {type(p).__name__}")
            if p.dtype != tensor.dtype:
                raise TypeError(f"{method}: {what} has dtype {p.dtype}, tensor has "
                                f"{tensor.dtype}; they must match")
            if p.device != tensor.device:
                raise ValueError(f"{method}: {what} is on {p.device}, tensor on {tensor.device}; "
                                 "they must match")
            if p.numel() != tensor.numel():
                raise ValueError(f"{method}: {what} has {p.numel()} elements (shape "
                                 f"{tuple(p.shape)}), tensor has {tensor.numel()}; they must match")
    return parts


def _info_count(coll, tensor, out, nranks):
    """The count yaliAlgoInfo takes for ``coll`` called with input ``tensor`` and output ``out``
    (None: in place), as the methods derive it."""
    if coll == Collective.AlltoAll:
        return tensor.numel() // nranks
    if coll in (Collective.ReduceScatter, Collective.Scatter):
        return tensor.numel() // nranks if out is None else out.numel()
    return tensor.numel()


def _algo_info(comm, method, tensor, op, out, collective, root, nranks):
    coll = yali.as_collective(collective, method)
    code = _op_code(op, method)
    dtype, per = _dtype_code(method, "tensor", tensor)
    count = _info_count(coll, tensor, out, nranks) * per
    if coll in (Collective.AllReduce, Collective.ReduceScatter, Collective.Reduce):
        code = _check_op_dtype(method, code, tensor.dtype)
    out = tensor if out is None else out
    if coll == Collective.AllReduce:
        return comm.all_reduce_algo_info(count, dtype, code,
                                         send_ptr=_info_ptr(tensor), recv_ptr=_info_ptr(out))
    return comm.algo_info(coll, count, dtype, code, root,
                          send_ptr=_info_ptr(tensor), recv_ptr=_info_ptr(out))


# ---- Communicators -------------------------------------------------------------------------------


class Communicator(yali._ClosingContext):
    """A YALI communicator over the ranks of a torch.distributed process group, one GPU each.

    ``group``: a ProcessGroup (default WORLD; any backend: the group only carries the unique id).
    ``device``: this rank's GPU (default: torch.cuda.current_device()).
    Creating it is collective over the group, and so is ``close()``.

    Every collective is collective over the group: every rank calls it, in the same order, with
    the same shapes, dtype, op and root. It runs on torch's current stream and returns without
    synchronizing the host (like torch.distributed with async_op=False on NCCL: ordered on the
    stream). ``send``/``recv`` are not collective: only the two ranks take part. ``rank`` and
    ``world_size`` are the group's.
    """

    # Global rank -> rank in the group; None when they coincide (the default group, say).
    _global_to_group = None

    def __init__(self, group=None, device=None):
        method = "Communicator"
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"{method}: torch.distributed is not initialized; call "
                "torch.distributed.init_process_group first (or use SingleProcessCommunicator)"
            )
        if not torch.cuda.is_available():
            raise RuntimeError(f"{method}: CUDA is not available")
        self.group = dist.group.WORLD if group is None else group
        rank = dist.get_rank(self.group)
        size = dist.get_world_size(self.group)
        if rank < 0:
            raise ValueError(f"{method}: this process is not a member of group {self.group}")
        dev = torch.cuda.current_device() if device is None else _device_index(device, method)
        self._comm = None
        with torch.cuda.device(dev):
            # Rank 0 sends the id, or its error so that the others fail instead of waiting.
            payload = [None]
            if rank == 0:
                try:
                    payload[0] = bytes(yali.get_unique_id())
                except Exception as e:  # noqa: BLE001 (re-raised on every rank below)
                    payload[0] = f"{type(e).__name__}: {e}"
            src = 0 if self.group is dist.group.WORLD else dist.get_global_rank(self.group, 0)
            dist.broadcast_object_list(payload, src=src, group=self.group)
            if not isinstance(payload[0], bytes):
                raise RuntimeError(f"{method}: rank 0 could not create the unique id: {payload[0]}")
            comm = yali.Comm.init_rank(size, yali.UniqueId(payload[0]), rank)
        if comm.device != dev or comm.rank != rank or comm.size != size:
            comm.abort()
            raise RuntimeError(
                f"{method}: the comm reports rank {comm.rank}/{comm.size} on cuda:{comm.device}; "
                f"expected {rank}/{size} on cuda:{dev}"
            )
        self._comm = comm
        self._handle = comm.handle
        self.rank = rank
        self.world_size = size
        self.device = torch.device("cuda", dev)
        self._device_index = dev
        ranks = list(dist.get_process_group_ranks(self.group))
        if ranks != list(range(size)):
            self._global_to_group = {g: i for i, g in enumerate(ranks)}
        _LIVE[self._handle] = comm

    # -- properties

    @property
    def handle(self):
        """The yaliComm_t as an int (what the torch.ops.yali operators take)."""
        if self._comm is None:
            raise _capi.python_error(
                yali.Result.InvalidUsage, "Communicator", "this communicator is closed"
            )
        return self._handle

    @property
    def comm(self):
        """The low-level yali.Comm."""
        return self._comm

    @property
    def closed(self):
        return self._comm is None

    # -- collectives

    def all_reduce(self, tensor, op="sum", out=None):
        """All-reduce ``tensor`` across the group: in place (returns ``tensor``), or into ``out``
        (same shape and dtype, disjoint memory; returns ``out``). On torch's current stream; no
        host synchronization. Every dtype in DTYPES, bool and complex (see the module docstring:
        Types); op="avg" for floating dtypes only (and complex).

        Raises the comm's asynchronous error (YaliTimeout, ...) once a collective has failed, before
        launching. Captured in a CUDA graph, it is not checked at replay: see
        ``check_async_error``."""
        method = "Communicator.all_reduce"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
            if out is not None and out is not tensor:
                _check_out(method, tensor, out)
        _check_op_dtype(method, code, tensor.dtype)
        if out is None or out is tensor:
            _all_reduce_ops.inplace(tensor, handle, code)
            return tensor
        _all_reduce_ops.out(tensor, out, handle, code)
        return out

    def all_reduce_functional(self, tensor, op="sum"):
        """All-reduce into a new tensor (``tensor`` is unchanged). Errors as ``all_reduce``."""
        method = "Communicator.all_reduce_functional"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        _check_op_dtype(method, code, tensor.dtype)
        return _all_reduce_ops.functional(tensor, handle, code)

    def _root(self, method, name, rank, group_rank, default=None, role="the root's rank"):
        """The comm rank of a root (or of a peer) given the way torch.distributed takes it: ``name``
        (src, dst or peer) a global rank, or ``group_<name>`` a rank within the group; ``default``
        (a global rank) when neither is given, else both missing is an error (naming ``role``)."""
        if rank is not None and group_rank is not None:
            raise ValueError(f"{method}: pass {name} or group_{name}, not both")
        if group_rank is not None:
            return _as_rank(method, f"group_{name}", group_rank, self.world_size)
        if rank is None:
            if default is None:
                raise ValueError(f"{method}: {name} ({role}) is required")
            rank = default
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"{method}: {name} must be an int, got {type(rank).__name__}")
        to_group = self._global_to_group
        if to_group is None:  # global and group ranks coincide (the default group, say)
            return _as_rank(method, name, rank, self.world_size)
        if rank not in to_group:
            raise ValueError(
                f"{method}: {name}={rank} (a global rank, as in torch.distributed) is not in this "
                f"communicator's group, whose global ranks are {sorted(to_group)}; pass "
                f"group_{name}= for a rank within the group"
            )
        return to_group[rank]

    def all_gather_into_tensor(self, output_tensor, input_tensor):
        """All-gather: every rank's ``output_tensor`` gets every rank's ``input_tensor``, rank i's
        at element offset i * input_tensor.numel() (as torch.distributed.all_gather_into_tensor:
        shape (world_size * d0, ...) concatenates along dim 0, (world_size, *input.shape) stacks;
        any shape with world_size * input_tensor.numel() elements is accepted). Returns
        ``output_tensor``. In place when ``input_tensor`` is the rank's own block of
        ``output_tensor`` (``output_tensor.view(-1)[rank * n:(rank + 1) * n]``); any other
        overlap is refused. Every dtype in DTYPES, bool and complex (moved as bytes)."""
        method = "Communicator.all_gather_into_tensor"
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "input_tensor", input_tensor, self._device_index)
            n = input_tensor.numel()
            _check_like(method, "output_tensor", output_tensor, input_tensor, "input_tensor",
                        self.world_size * n, f"world_size ({self.world_size}) x input_tensor.numel() "
                        f"({n})")
            _check_overlap(method, "output_tensor", output_tensor, "input_tensor", input_tensor,
                           self.rank * n, "output_tensor's block for this rank (elements "
                           f"{self.rank * n}..{(self.rank + 1) * n - 1})")
        _Ops.all_gather_into_tensor(output_tensor, input_tensor, handle)
        return output_tensor

    def all_gather_functional(self, input_tensor):
        """All-gather into a new tensor of shape (world_size * d0, *rest) (rank i's input in rows
        i * d0 ... ; a 0-d input gives (world_size,)). ``input_tensor`` is unchanged."""
        method = "Communicator.all_gather_functional"
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "input_tensor", input_tensor, self._device_index)
        return _Ops.all_gather(input_tensor, handle, self.world_size)

    def reduce_scatter_tensor(self, output, input, op="sum"):
        """Reduce-scatter: ``input`` (world_size * output.numel() elements, the same shape on every
        rank) is reduced across the ranks with ``op``; rank i's ``output`` gets block i (elements
        i * output.numel() ... of the flat reduction), as torch.distributed.reduce_scatter_tensor.
        Returns ``output``. In place when ``output`` is the rank's own block of ``input``
        (``input.view(-1)[rank * m:(rank + 1) * m]``); any other overlap is refused."""
        method = "Communicator.reduce_scatter_tensor"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "output", output, self._device_index)
            m = output.numel()
            _check_like(method, "input", input, output, "output", self.world_size * m,
                        f"world_size ({self.world_size}) x output.numel() ({m})")
            _check_overlap(method, "input", input, "output", output, self.rank * m,
                           f"input's block for this rank (elements {self.rank * m}.."
                           f"{(self.rank + 1) * m - 1})")
        _check_op_dtype(method, code, input.dtype, "input")
        _Ops.reduce_scatter_tensor(output, input, handle, code)
        return output

    def reduce_scatter_functional(self, input, op="sum"):
        """Reduce-scatter into a new tensor of shape (d0 / world_size, *rest): this rank's block of
        the reduction of ``input`` (whose first dimension must be a multiple of the world size).
        ``input`` is unchanged."""
        method = "Communicator.reduce_scatter_functional"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "input", input, self._device_index)
            _check_rows(method, "input", input, self.world_size)
        _check_op_dtype(method, code, input.dtype, "input")
        return _Ops.reduce_scatter(input, handle, code, self.world_size)

    def broadcast(self, tensor, src=None, *, group_src=None):
        """Broadcast ``tensor`` in place from rank ``src`` to every rank (as
        torch.distributed.broadcast: ``src`` a global rank, or ``group_src`` a rank of the group;
        the same for the default group). Returns ``tensor``."""
        method = "Communicator.broadcast"
        root = self._root(method, "src", src, group_src)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        _Ops.broadcast_(tensor, handle, root)
        return tensor

    def reduce(self, tensor, dst=None, op="sum", *, group_dst=None):
        """Reduce ``tensor`` across the ranks with ``op`` into ``tensor`` on rank ``dst`` (in
        place; as torch.distributed.reduce: ``dst`` a global rank, or ``group_dst`` a rank of the
        group). On the other ranks ``tensor`` is only read: it is left unchanged. Returns
        ``tensor``."""
        method = "Communicator.reduce"
        code = _op_code(op, method)
        root = self._root(method, "dst", dst, group_dst)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        _check_op_dtype(method, code, tensor.dtype)
        _Ops.reduce_(tensor, handle, code, root)
        return tensor

    def gather(self, tensor, gather_list=None, dst=None, *, group_dst=None):
        """Gather every rank's ``tensor`` on rank ``dst`` (default: global rank 0; ``group_dst``:
        a rank of the group), as torch.distributed.gather.

        ``gather_list``, used on ``dst`` only (elsewhere a list must be None or empty, else
        ValueError, as in torch.distributed; a tensor is not looked at):
          - a list of world_size tensors, each with tensor.numel() elements, of its dtype, on its
            GPU (any shape and layout): gather_list[i] gets rank i's ``tensor``. The data lands
            in one internal buffer first and is then copied into the list (one extra copy; a
            list entry may be ``tensor`` itself; refused inside ``yali.group()``, where the copy
            would run before the gather);
          - or one contiguous tensor with world_size * tensor.numel() elements: rank i's tensor
            at element offset i * tensor.numel(), no extra copy. In place when ``tensor`` is its
            block for ``dst`` (``gather_list.view(-1)[dst * n:(dst + 1) * n]``); any other
            overlap is refused.
        Returns ``gather_list`` on ``dst``, None elsewhere. ``tensor`` is only read."""
        method = "Communicator.gather"
        root = self._root(method, "dst", dst, group_dst, default=0)
        handle = self.handle
        checking = not _is_compiling()
        if checking:
            _check_tensor(method, "tensor", tensor, self._device_index)
        if self.rank != root:
            _check_absent(method, "gather_list", gather_list, "destination", root, self.rank)
            # The library does not look at the output off root: an empty stand-in.
            _Ops.gather(tensor.new_empty(0), tensor, handle, root)
            return None
        n = tensor.numel()
        if isinstance(gather_list, torch.Tensor):
            if checking:
                _check_like(method, "gather_list", gather_list, tensor, "tensor",
                            self.world_size * n, f"world_size ({self.world_size}) x "
                            f"tensor.numel() ({n})")
                _check_overlap(method, "gather_list", gather_list, "tensor", tensor, root * n,
                               f"gather_list's block for dst (elements {root * n}.."
                               f"{(root + 1) * n - 1})")
            _Ops.gather(gather_list, tensor, handle, root)
            return gather_list
        parts = _check_list(method, "gather_list", gather_list, tensor, self.world_size,
                            "destination", checking)
        if checking:
            _refuse_gather_list_in_group(method)
        buf = tensor.new_empty((self.world_size, n))
        _Ops.gather(buf, tensor, handle, root)
        for i, part in enumerate(parts):
            part.copy_(buf[i].view(part.shape))
        return gather_list

    def scatter(self, tensor, scatter_list=None, src=None, *, group_src=None):
        """Scatter from rank ``src`` (default: global rank 0; ``group_src``: a rank of the group)
        into every rank's ``tensor``, as torch.distributed.scatter: rank i's ``tensor`` gets
        block i of ``scatter_list``. Returns ``tensor``.

        ``scatter_list``, used on ``src`` only (elsewhere a list must be None or empty, else
        ValueError, as in torch.distributed; a tensor is not looked at):
          - a list of world_size tensors, each with tensor.numel() elements, of its dtype, on its
            GPU (any shape and layout): copied into one internal buffer first (one extra copy; an
            entry may be ``tensor`` itself; refused inside ``yali.group()``, where the buffer
            would be freed before the scatter reads it);
          - or one contiguous tensor with world_size * tensor.numel() elements, block i at element
            offset i * tensor.numel(), no extra copy. In place when ``tensor`` is its block for
            ``src`` (``scatter_list.view(-1)[src * n:(src + 1) * n]``); any other overlap is
            refused. It is only read."""
        method = "Communicator.scatter"
        root = self._root(method, "src", src, group_src, default=0)
        handle = self.handle
        checking = not _is_compiling()
        if checking:
            _check_tensor(method, "tensor", tensor, self._device_index)
        if self.rank != root:
            _check_absent(method, "scatter_list", scatter_list, "source", root, self.rank)
            _Ops.scatter(tensor, tensor.new_empty(0), handle, root)
            return tensor
        n = tensor.numel()
        if isinstance(scatter_list, torch.Tensor):
            if checking:
                _check_like(method, "scatter_list", scatter_list, tensor, "tensor",
                            self.world_size * n, f"world_size ({self.world_size}) x "
                            f"tensor.numel() ({n})")
                _check_overlap(method, "scatter_list", scatter_list, "tensor", tensor, root * n,
                               f"scatter_list's block for src (elements {root * n}.."
                               f"{(root + 1) * n - 1})")
            _Ops.scatter(tensor, scatter_list, handle, root)
            return tensor
        parts = _check_list(method, "scatter_list", scatter_list, tensor, self.world_size,
                            "source", checking)
        if checking:
            _refuse_scatter_list_in_group(method)
        buf = torch.cat([p.reshape(-1) for p in parts])
        _Ops.scatter(tensor, buf, handle, root)
        return tensor

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None):
        """All-to-all, as torch.distributed.all_to_all_single. Returns ``output``. Never in place:
        ``output`` and ``input`` must not overlap.

        Without split sizes (both None): even splits, yaliAlltoAll. ``input``'s first dimension
        is cut into world_size equal blocks; block j goes to rank j, which stores the block from
        rank i as block i of ``output`` (the same number of elements as ``input``, its first
        dimension also a multiple of world_size). Every dtype in DTYPES, bool and complex.

        With split sizes (either given; every rank must then give them, as every rank must make
        the same call): uneven splits, yaliAlltoAllv. Rows along dim 0 (a row:
        input[0].numel() elements, ``output.shape[1:] == input.shape[1:]``), any dtype (moved as
        bytes): this rank sends ``input_split_sizes[j]`` rows to rank j, and receives
        ``output_split_sizes[i]`` rows from rank i, packed in rank order into ``output``. A split
        size left None is the even split of its tensor. Host lists of ints: a CUDA graph keeps the
        values of its capture (for counts that change from step to step, use
        ``all_to_all_device_counts``). ``output_split_sizes[i]`` must equal rank i's
        ``input_split_sizes[this rank]``; that is checked on the device: a mismatch writes nothing
        and fails the comm on every rank (YaliInvalidUsage from ``check()`` and every later
        call)."""
        method = "Communicator.all_to_all_single"
        handle = self.handle
        ws = self.world_size
        if output_split_sizes is None and input_split_sizes is None:
            if not _is_compiling():
                _check_tensor(method, "input", input, self._device_index)
                _check_like(method, "output", output, input, "input", input.numel(),
                            "input.numel()")
                _check_rows(method, "input", input, ws)
                _check_rows(method, "output", output, ws)
                _check_overlap(method, "output", output, "input", input)
            _Ops.all_to_all_single(output, input, handle)
            return output
        if not _is_compiling():
            _require_tensors(method, (("output", output), ("input", input)))
            _check_exchange(method, output, input, self._device_index)
            _check_overlap(method, "output", output, "input", input)
        out_splits = _as_splits(method, "output_split_sizes", output_split_sizes, output, ws)
        in_splits = _as_splits(method, "input_split_sizes", input_split_sizes, input, ws)
        _Ops.all_to_all_v(output, input, out_splits, in_splits, handle)
        return output

    def _p2p_stream(self, method, stream):
        """``stream`` (a torch.cuda.Stream on this rank's GPU) checked, or None: torch's current
        stream."""
        if stream is None or _is_compiling():
            return stream
        if not isinstance(stream, torch.cuda.Stream):
            raise TypeError(f"{method}: stream must be a torch.cuda.Stream or None, got "
                            f"{type(stream).__name__}")
        if stream.device != self.device:
            raise ValueError(f"{method}: stream is on {stream.device}, the comm on {self.device}")
        return stream

    def send(self, tensor, peer=None, stream=None, *, group_peer=None):
        """Send ``tensor`` to rank ``peer`` (yaliSend, NCCL's ncclSend; ``peer`` a global rank, as
        torch.distributed.send's dst, or ``group_peer`` a rank of the group). The peer's matching
        ``recv`` (its k-th from this rank for this rank's k-th send to it) takes the same number of
        bytes. Only the two ranks take part. Every dtype in DTYPES, bool and complex.

        A send ends once its data is in the peer's rings (a send larger than them waits for the
        matching recv to run; a difference in bytes then reaches this rank at its next call):
        sends and receives that must progress together (a
        ring shift, a pipeline exchange) go in one ``with yali.group():``, which also holds a send
        to this rank itself and its recv (the library refuses one outside a group:
        YaliInvalidUsage). On torch's current stream, or on ``stream`` (a torch.cuda.Stream on this
        rank's GPU; the caller keeps ``tensor`` alive until that stream's work is done, e.g.
        ``tensor.record_stream(stream)``, as for any tensor used on a side stream). No host
        synchronization; returns None."""
        method = "Communicator.send"
        rank = self._root(method, "peer", peer, group_peer, role="the receiver's rank")
        handle = self.handle
        stream = self._p2p_stream(method, stream)
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        if stream is None:
            _Ops.send(tensor, handle, rank)
        else:
            with torch.cuda.stream(stream):
                _Ops.send(tensor, handle, rank)

    def recv(self, tensor, peer=None, stream=None, *, group_peer=None):
        """Receive into ``tensor`` from rank ``peer`` (yaliRecv, NCCL's ncclRecv; ``peer`` a global
        rank, as torch.distributed.recv's src, or ``group_peer`` a rank of the group): the peer's
        matching ``send``, of the same number of bytes (a difference fails the comm on both ranks,
        checked on the device). Returns ``tensor``; inside a group it is written only at the
        outermost group end. Groups, streams and dtypes as for ``send``."""
        method = "Communicator.recv"
        rank = self._root(method, "peer", peer, group_peer, role="the sender's rank")
        handle = self.handle
        stream = self._p2p_stream(method, stream)
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        if stream is None:
            _Ops.recv_(tensor, handle, rank)
        else:
            with torch.cuda.stream(stream):
                _Ops.recv_(tensor, handle, rank)
        return tensor

    def all_to_all_device_counts(self, output, input, input_splits, output_splits=None,
                                 output_offsets=None):
        """All-to-all with counts on the device (no host round trip): ``input_splits``, an int64
        CUDA tensor [world_size] written by an earlier kernel on the current stream (a router),
        holds the rows of ``input`` (dim 0, packed in rank order) for each rank. What this rank
        receives is packed in source-rank order into ``output``, which holds at most
        output.size(0) rows; ``output_splits`` and ``output_offsets`` (int64 CUDA tensors
        [world_size], or None) receive the rows from each rank and the row where they start. Rows:
        ``output.shape[1:] == input.shape[1:]``, any dtype (moved as bytes). Returns ``output``.

        A captured CUDA graph replays with whatever counts each step writes into
        ``input_splits``. More rows than output.size(0) (or a negative count) fail the count
        check: nothing is written into ``output``, ``output_splits`` and ``output_offsets`` hold
        -1 on the rank that failed (a flag a later kernel can test), and the comm fails on every
        rank: YaliInvalidUsage from ``check()`` (after a graph replay) and from every later call.

        yaliExpertDispatch with one expert per rank; output_offsets are computed on the stream
        after it, so they are refused inside ``yali.group()`` (YaliInvalidUsage)."""
        method = "Communicator.all_to_all_device_counts"
        handle = self.handle
        ws = self.world_size
        if not _is_compiling():
            if output_offsets is not None:
                _refuse_offsets_in_group(method)
            counts = (("input_splits", input_splits), ("output_splits", output_splits),
                      ("output_offsets", output_offsets))
            _require_tensors(method, (("output", output), ("input", input)) + counts)
            _check_exchange(method, output, input, self._device_index)
            _check_overlap(method, "output", output, "input", input)
            for name, t in counts:
                if t is not None:
                    _check_counts(method, name, t, ws, f"world_size ({ws})", self._device_index)
            _check_count_overlaps(method, counts)
        _Ops.all_to_all_device_counts(output, input, input_splits, output_splits, output_offsets,
                                      handle)
        return output

    def expert_dispatch(self, output, input, send_counts, local_experts, align=1, recv_counts=None,
                        expert_offsets=None):
        """Mixture-of-Experts dispatch (yaliExpertDispatch), counts on the device. E =
        ``local_experts`` experts live on each rank (1..yali.MAX_LOCAL_EXPERTS, world_size x E <=
        yali.MAX_EXPERTS); global expert g = d * E + e is local expert e of rank d.

        ``send_counts``: int64 CUDA tensor [world_size * E], [g] the rows this rank sends to global
        expert g; ``input``: those rows sorted by global expert (expert 0's, then expert 1's, ...,
        packed). ``output`` (capacity output.size(0) rows) gets, expert-major, every rank's rows for
        this rank's experts: local expert 0's segment (rank 0's rows, then rank 1's, ...), then
        local expert 1's at the next multiple of ``align`` rows (e.g. a grouped GEMM's tile), and
        so on; padding rows are not written. ``recv_counts`` (int64 [E * world_size], [e *
        world_size + s]: rows of local expert e from rank s) and ``expert_offsets`` (int64 [E + 1]:
        each segment's first row, and [E] the rows used) are optional outputs. Rows:
        ``output.shape[1:] == input.shape[1:]``, any dtype. Returns ``output``.

        A captured CUDA graph replays with whatever counts each step writes into ``send_counts``.
        A capacity overflow (or a negative count) fails the count check: nothing is written into
        ``output``, ``recv_counts`` and ``expert_offsets`` hold -1 on the rank that failed, and the
        comm fails on every rank: YaliInvalidUsage from ``check()`` (after a graph replay) and from
        every later call."""
        method = "Communicator.expert_dispatch"
        handle = self.handle
        ws = self.world_size
        _check_experts(method, local_experts, align, ws)
        if not _is_compiling():
            e = local_experts
            counts = (("send_counts", send_counts), ("recv_counts", recv_counts),
                      ("expert_offsets", expert_offsets))
            _require_tensors(method, (("output", output), ("input", input)) + counts)
            _check_exchange(method, output, input, self._device_index)
            _check_overlap(method, "output", output, "input", input)
            _check_counts(method, "send_counts", send_counts, ws * e,
                          f"world_size ({ws}) x local_experts ({e})", self._device_index)
            if recv_counts is not None:
                _check_counts(method, "recv_counts", recv_counts, e * ws,
                              f"local_experts ({e}) x world_size ({ws})", self._device_index)
            if expert_offsets is not None:
                _check_counts(method, "expert_offsets", expert_offsets, e + 1,
                              f"local_experts ({e}) + 1", self._device_index)
            _check_count_overlaps(method, counts)
        _Ops.expert_dispatch(output, input, send_counts, local_experts, align, recv_counts,
                             expert_offsets, handle)
        return output

    def expert_combine(self, output, input, send_counts, local_experts, align=1):
        """Mixture-of-Experts combine (yaliExpertCombine), the inverse of ``expert_dispatch``:
        every row of ``input`` (in the dispatch's output layout, e.g. the experts' outputs;
        capacity input.size(0) rows) goes back to the rank and the row it came from, so ``output``
        ends up in the dispatch's input layout (rows sorted by global expert; it must hold the
        sum of ``send_counts`` rows). ``send_counts``, ``local_experts`` and ``align``: the
        dispatch's, unchanged. Returns ``output``. Failures as for ``expert_dispatch``."""
        method = "Communicator.expert_combine"
        handle = self.handle
        ws = self.world_size
        _check_experts(method, local_experts, align, ws)
        if not _is_compiling():
            _require_tensors(method, (("output", output), ("input", input),
                                      ("send_counts", send_counts)))
            _check_exchange(method, output, input, self._device_index)
            _check_overlap(method, "output", output, "input", input)
            _check_counts(method, "send_counts", send_counts, ws * local_experts,
                          f"world_size ({ws}) x local_experts ({local_experts})",
                          self._device_index)
        _Ops.expert_combine(output, input, send_counts, local_experts, align, handle)
        return output

    def all_to_all_functional(self, input):
        """all_to_all_single (even splits) into a new tensor of ``input``'s shape."""
        method = "Communicator.all_to_all_functional"
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "input", input, self._device_index)
            _check_rows(method, "input", input, self.world_size)
        return _Ops.all_to_all(input, handle)

    def algo_info(self, tensor, op="sum", out=None, *, collective="all_reduce", root=0):
        """What a call would run (a yali.AlgoInfo), as the selector chooses: ``collective`` (a
        yali.Collective or a name: "all_reduce", "reduce_scatter", "all_gather", "broadcast",
        "reduce", "gather", "scatter", "all_to_all"; default all_reduce) with input ``tensor``
        and output ``out`` (None: in place). The buffers are passed, so registered tensors show the
        zero-copy algorithms. The C call's count is derived as the method does: tensor.numel(), or,
        where the input holds one block per rank (reduce_scatter, scatter, all_to_all),
        out.numel() (tensor.numel() / world_size without ``out``). ``root``: a rank of the
        communicator. Launches nothing."""
        method = "Communicator.algo_info"
        return _algo_info(self._comm_or_raise(), method, tensor, op, out, collective, root,
                          self.world_size)

    # -- registered memory (zero-copy)

    def register(self, tensor, nbytes=None):
        """yaliCommRegister of ``tensor``'s whole untyped storage (or of ``nbytes`` bytes from its
        data_ptr()). Collective over the group: same order and size on every rank. Returns a
        yali.Registration (``deregister()``; usable in a ``with`` block); ``close()`` ends it."""
        method = "Communicator.register"
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{method}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device != self.device:
            raise ValueError(f"{method}: tensor is on {tensor.device}, the comm on {self.device}")
        return self._comm_or_raise().register(tensor, nbytes)

    def empty_registered(self, shape, dtype=torch.float32):
        """A new uninitialized tensor on this rank's GPU, registered (collective: every rank calls
        it in the same order with the same shape and dtype). all_reduce on it (in place, or with a
        registered ``out``) runs zero-copy. It stays registered until ``deregister(tensor)`` or
        ``close()``."""
        t = _empty_on(shape, dtype, self._device_index, "Communicator.empty_registered")
        self.register(t)
        return t

    def deregister(self, tensor_or_registration):
        """yaliCommDeregister (this rank only, not collective) of a Registration, or of the
        registration holding a tensor's storage (from ``empty_registered`` or ``register``)."""
        comm = self._comm_or_raise()
        _find_registration(comm.registrations, tensor_or_registration,
                           "Communicator.deregister").deregister()

    # -- life cycle

    def check_async_error(self):
        """Raise the YaliError subclass of the error a device-side operation hit, here or on a peer
        (YaliTimeout, YaliRemoteError, YaliInvalidUsage), with the library's message; return None
        while the comm is healthy. A host-memory read (about 1 us); it does not synchronize.

        Eager collectives raise that error themselves; a replayed CUDA graph does not (its YALI
        collectives write NaN into their outputs once the comm has failed). After replaying a
        graph, call this once the replay's work has finished and before trusting its outputs."""
        self._comm_or_raise().check_async_error()

    check = check_async_error  # reads well in a training loop: comm.check()

    def close(self):
        """yaliCommDestroy (collective over the group). Idempotent."""
        comm = self._release()
        if comm is not None:
            comm.destroy()

    def abort(self):
        """yaliCommAbort: frees without waiting for peers. Idempotent."""
        comm = self._release()
        if comm is not None:
            comm.abort()

    def _comm_or_raise(self):
        self.handle  # noqa: B018 (raises when closed)
        return self._comm

    def _devices(self):
        return [self._device_index]

    def _release(self):
        comm, self._comm = self._comm, None
        if comm is not None:
            _LIVE.pop(self._handle, None)
        return comm

    def __repr__(self):
        state = "closed" if self._comm is None else "open"
        return f"<yali.torch.Communicator rank {self.rank}/{self.world_size} {self.device} {state}>"


class SingleProcessCommunicator(yali._ClosingContext):
    """One process, several GPUs: rank i on ``devices[i]`` (default: every visible GPU).

    The collectives take one tensor per GPU where Communicator takes one tensor (``tensors[i]`` on
    ``devices[i]``); src/dst are indices into ``devices``. Each call issues every GPU's launch
    inside one group, on each device's current stream (ranks sharing a GPU, with
    YALI_ALLOW_SHARED_GPU=1, get streams of their own joined to it), and does not synchronize.
    They call the library directly (no custom operators): use them eagerly, outside torch.compile.
    Once any comm has failed they raise its error (YaliTimeout, ...) before launching on any GPU.
    Nested in an outer ``yali.group()``, the launches wait for its end, so the forms that do work of
    their own after the launch are refused there (YaliInvalidUsage): a list gather_list or
    scatter_list, output_offsets, and every call on ranks that share a GPU.
    """

    def __init__(self, devices=None):
        method = "SingleProcessCommunicator"
        if not torch.cuda.is_available():
            raise RuntimeError(f"{method}: CUDA is not available")
        if devices is None:
            devices = range(torch.cuda.device_count())
        self.devices = [_device_index(d, method) for d in devices]
        self.comms = yali.Comm.init_all(self.devices)
        for c in self.comms:
            _LIVE[c.handle] = c

    @property
    def world_size(self):
        return len(self.devices)

    @property
    def closed(self):
        return not self.comms

    # -- helpers of the collectives

    # Per-rank streams, made on first use when ranks share a GPU (see _run).
    _side_streams = None

    def _begin(self, method):
        """Open, and no comm failed: any failed comm stops the call before a launch on any GPU
        (a launch on a healthy comm whose peer failed would only wait for it)."""
        if not self.comms:
            raise _capi.python_error(yali.Result.InvalidUsage, method, "this communicator is closed")
        self._check_async_errors(method)

    def _per_rank(self, method, name, tensors):
        """``tensors`` as a list of one tensor per GPU (tensors[i] on devices[i]), all of one shape
        and dtype."""
        ts = list(tensors)
        n = len(self.devices)
        if len(ts) != n:
            raise ValueError(f"{method}: {name} has {len(ts)} tensors, expected {n} (one per GPU)")
        for i, t in enumerate(ts):
            _check_tensor(method, f"{name}[{i}]", t, self.devices[i])
            if i and (t.shape != ts[0].shape or t.dtype != ts[0].dtype):
                raise ValueError(
                    f"{method}: {name}[{i}] is {tuple(t.shape)} {t.dtype}, {name}[0] is "
                    f"{tuple(ts[0].shape)} {ts[0].dtype}; they must match"
                )
        return ts

    def _count_list(self, method, name, tensors):
        ts = list(tensors)
        if len(ts) != len(self.devices):
            raise ValueError(f"{method}: {name} has {len(ts)} tensors, expected "
                             f"{len(self.devices)} (one per GPU)")
        return ts

    def _run(self, method, launch):
        """``launch(i, comm, stream)`` for every rank i, inside one group: the kernels start at its
        end, all of them before this thread launches anything else (a thread driving several GPUs
        must group them, yali.h: Groups).

        Each rank runs on its device's current stream, except ranks that share a GPU
        (YALI_ALLOW_SHARED_GPU=1): on one stream, a rank's kernel would wait for a peer's kernel
        queued behind it until YALI_TIMEOUT_MS. Those ranks get a stream each, which waits for the
        device's current stream before the launch and which the current stream waits for after,
        so that the call is ordered with the caller's work exactly as on the current stream."""
        currents = [torch.cuda.current_stream(d) for d in self.devices]
        streams = currents
        if len(set(self.devices)) < len(self.devices):
            _refuse_in_group(method, "a call on ranks that share a GPU",
                             "the current stream is joined to the ranks' own streams right after "
                             "the launch, which inside a group happens only at the outermost "
                             "group end")
            if self._side_streams is None:
                self._side_streams = [torch.cuda.Stream(device=d) for d in self.devices]
            streams = self._side_streams
            for s, c in zip(streams, currents):
                s.wait_stream(c)
        try:
            with yali.group():
                # `launch` holds the call's tensors (its closure): kept until the outermost group
                # end, which is later than this one when the caller has a group open (the launches
                # wait for it; keep_for_group).
                _capi.keep_for_group((launch,))
                for i, (dev, comm, s) in enumerate(zip(self.devices, self.comms, streams)):
                    with torch.cuda.device(dev):
                        launch(i, comm, s.cuda_stream)
        finally:
            if streams is not currents:
                for s, c in zip(streams, currents):
                    c.wait_stream(s)

    # -- collectives: one tensor per GPU where Communicator takes one tensor

    def all_reduce(self, tensors, op="sum", outs=None):
        """All-reduce ``tensors[i]`` (on ``devices[i]``) in place, or into ``outs[i]``; each on its
        device's current stream. Returns the list of results.

        Once a collective has failed (any comm's asynchronous error), raises it (YaliTimeout, ...)
        before launching on any GPU. Captured in a CUDA graph, it is not checked at replay: see
        ``check_async_error``."""
        method = "SingleProcessCommunicator.all_reduce"
        code = _op_code(op, method)
        self._begin(method)
        tensors = self._per_rank(method, "tensors", tensors)
        n = len(self.devices)
        if outs is None:
            outs = tensors
        else:
            outs = list(outs)
            if len(outs) != n:
                raise ValueError(f"{method}: outs has {len(outs)} tensors, expected {n}")
            for i, (t, o) in enumerate(zip(tensors, outs)):
                if o is not t:
                    _check_out(method, t, o, f"outs[{i}]", f"tensors[{i}]")
        code = _check_op_dtype(method, code, tensors[0].dtype, "tensors[0]")
        dtype, per = _WIRE[tensors[0].dtype]
        count = tensors[0].numel() * per
        self._run(method, lambda i, comm, stream: _capi.all_reduce(
            tensors[i].data_ptr(), outs[i].data_ptr(), count, dtype, code, comm.handle, stream))
        return outs

    def all_gather_into_tensor(self, output_tensors, input_tensors):
        """All-gather: every ``output_tensors[i]`` (world_size x input numel elements, any shape)
        gets every GPU's input, GPU j's at element offset j * n. In place when input_tensors[i]
        is block i of output_tensors[i]. Returns ``output_tensors``. See
        Communicator.all_gather_into_tensor."""
        method = "SingleProcessCommunicator.all_gather_into_tensor"
        self._begin(method)
        ins = self._per_rank(method, "input_tensors", input_tensors)
        outs = self._count_list(method, "output_tensors", output_tensors)
        ws, n = len(self.devices), ins[0].numel()
        for i, (o, t) in enumerate(zip(outs, ins)):
            _check_like(method, f"output_tensors[{i}]", o, t, f"input_tensors[{i}]", ws * n,
                        f"world_size ({ws}) x input numel ({n})")
            _check_overlap(method, f"output_tensors[{i}]", o, f"input_tensors[{i}]", t, i * n,
                           f"block {i} of output_tensors[{i}]")
        dtype, per = _WIRE[ins[0].dtype]
        self._run(method, lambda i, comm, stream: _capi.all_gather(
            ins[i].data_ptr(), outs[i].data_ptr(), n * per, dtype, comm.handle, stream))
        return outs

    def reduce_scatter_tensor(self, output_tensors, input_tensors, op="sum"):
        """Reduce-scatter: ``input_tensors`` (world_size x output numel elements each) are
        reduced with ``op``; ``output_tensors[i]`` gets block i of the reduction. In place when
        output_tensors[i] is block i of input_tensors[i]. Returns ``output_tensors``."""
        method = "SingleProcessCommunicator.reduce_scatter_tensor"
        code = _op_code(op, method)
        self._begin(method)
        outs = self._per_rank(method, "output_tensors", output_tensors)
        ins = self._count_list(method, "input_tensors", input_tensors)
        ws, m = len(self.devices), outs[0].numel()
        for i, (o, t) in enumerate(zip(outs, ins)):
            _check_like(method, f"input_tensors[{i}]", t, o, f"output_tensors[{i}]", ws * m,
                        f"world_size ({ws}) x output numel ({m})")
            _check_overlap(method, f"input_tensors[{i}]", t, f"output_tensors[{i}]", o, i * m,
                           f"block {i} of input_tensors[{i}]")
        code = _check_op_dtype(method, code, outs[0].dtype, "output_tensors[0]")
        dtype, per = _WIRE[outs[0].dtype]
        self._run(method, lambda i, comm, stream: _capi.reduce_scatter(
            ins[i].data_ptr(), outs[i].data_ptr(), m * per, dtype, code, comm.handle, stream))
        return outs

    def broadcast(self, tensors, src):
        """Broadcast ``tensors[src]`` into every ``tensors[i]`` (in place). ``src``: an index into
        ``devices``. Returns ``tensors``."""
        method = "SingleProcessCommunicator.broadcast"
        self._begin(method)
        root = _as_rank(method, "src", src, len(self.devices))
        ts = self._per_rank(method, "tensors", tensors)
        dtype, per = _WIRE[ts[0].dtype]
        n = ts[0].numel() * per
        self._run(method, lambda i, comm, stream: _capi.broadcast(
            ts[i].data_ptr(), ts[i].data_ptr(), n, dtype, root, comm.handle, stream))
        return ts

    def reduce(self, tensors, dst, op="sum"):
        """Reduce every ``tensors[i]`` with ``op`` into ``tensors[dst]`` (in place); the others are
        only read (left unchanged). ``dst``: an index into ``devices``. Returns ``tensors``."""
        method = "SingleProcessCommunicator.reduce"
        code = _op_code(op, method)
        self._begin(method)
        root = _as_rank(method, "dst", dst, len(self.devices))
        ts = self._per_rank(method, "tensors", tensors)
        code = _check_op_dtype(method, code, ts[0].dtype, "tensors[0]")
        dtype, per = _WIRE[ts[0].dtype]
        n = ts[0].numel() * per
        self._run(method, lambda i, comm, stream: _capi.reduce(
            ts[i].data_ptr(), ts[i].data_ptr(), n, dtype, code, root, comm.handle, stream))
        return ts

    def gather(self, tensors, gather_list, dst=0):
        """Gather every ``tensors[i]`` on GPU ``dst`` (an index into ``devices``). ``gather_list``
        lives on that GPU: a list of world_size tensors (gather_list[i] gets tensors[i]; copied
        from an internal buffer) or one contiguous tensor of world_size x numel elements (tensor
        i at element offset i * numel; in place when tensors[dst] is block dst of it). Returns
        ``gather_list``. See Communicator.gather."""
        method = "SingleProcessCommunicator.gather"
        self._begin(method)
        root = _as_rank(method, "dst", dst, len(self.devices))
        ts = self._per_rank(method, "tensors", tensors)
        ws, n = len(self.devices), ts[0].numel()
        parts = None
        if isinstance(gather_list, torch.Tensor):
            _check_like(method, "gather_list", gather_list, ts[root], f"tensors[{root}]", ws * n,
                        f"world_size ({ws}) x tensor numel ({n})")
            _check_overlap(method, "gather_list", gather_list, f"tensors[{root}]", ts[root],
                           root * n, f"block {root} of gather_list")
            buf = gather_list
        else:
            parts = _check_list(method, "gather_list", gather_list, ts[root], ws, "destination")
            _refuse_gather_list_in_group(method)
            buf = ts[root].new_empty((ws, n))
        dtype, per = _WIRE[ts[0].dtype]
        self._run(method, lambda i, comm, stream: _capi.gather(
            ts[i].data_ptr(), buf.data_ptr() if i == root else None, n * per, dtype, root,
            comm.handle,
            stream))
        if parts is not None:
            for i, p in enumerate(parts):
                p.copy_(buf[i].view(p.shape))
        return gather_list

    def scatter(self, tensors, scatter_list, src=0):
        """Scatter from GPU ``src`` (an index into ``devices``): ``tensors[i]`` gets block i of
        ``scatter_list``, which lives on that GPU: a list of world_size tensors (copied into an
        internal buffer first) or one contiguous tensor of world_size x numel elements (in place
        when tensors[src] is block src of it). Returns ``tensors``. See Communicator.scatter."""
        method = "SingleProcessCommunicator.scatter"
        self._begin(method)
        root = _as_rank(method, "src", src, len(self.devices))
        ts = self._per_rank(method, "tensors", tensors)
        ws, n = len(self.devices), ts[0].numel()
        if isinstance(scatter_list, torch.Tensor):
            _check_like(method, "scatter_list", scatter_list, ts[root], f"tensors[{root}]", ws * n,
                        f"world_size ({ws}) x tensor numel ({n})")
            _check_overlap(method, "scatter_list", scatter_list, f"tensors[{root}]", ts[root],
                           root * n, f"block {root} of scatter_list")
            buf = scatter_list
        else:
            parts = _check_list(method, "scatter_list", scatter_list, ts[root], ws, "source")
            _refuse_scatter_list_in_group(method)
            buf = torch.cat([p.reshape(-1) for p in parts])
        dtype, per = _WIRE[ts[0].dtype]
        self._run(method, lambda i, comm, stream: _capi.scatter(
            buf.data_ptr() if i == root else None, ts[i].data_ptr(), n * per, dtype, root,
            comm.handle,
            stream))
        return ts

    def all_to_all_single(self, output_tensors, input_tensors, output_split_sizes=None,
                          input_split_sizes=None):
        """All-to-all. Without split sizes: even splits, block j of input_tensors[i] (first
        dimension cut into world_size blocks) goes to block i of output_tensors[j]; every dtype
        in DTYPES, bool and complex. With split sizes (yaliAlltoAllv): rows along dim 0, any
        dtype, the same row shape on every GPU; GPU i sends ``input_split_sizes[i][j]`` rows to GPU j, which packs
        what it receives in GPU order. Each split argument: None (the even split of each
        tensor), one list of ints (the same on every GPU), or one list per GPU; checked on the
        host to agree (``output_split_sizes[j][i] == input_split_sizes[i][j]``). Never in place.
        Returns ``output_tensors``."""
        method = "SingleProcessCommunicator.all_to_all_single"
        self._begin(method)
        if output_split_sizes is not None or input_split_sizes is not None:
            return self._all_to_all_v(method, output_tensors, input_tensors, output_split_sizes,
                                      input_split_sizes)
        ins = self._per_rank(method, "input_tensors", input_tensors)
        outs = self._count_list(method, "output_tensors", output_tensors)
        ws, n = len(self.devices), ins[0].numel()
        _check_rows(method, "input_tensors[0]", ins[0], ws)
        for i, (o, t) in enumerate(zip(outs, ins)):
            _check_like(method, f"output_tensors[{i}]", o, t, f"input_tensors[{i}]", n,
                        "the input's numel")
            _check_rows(method, f"output_tensors[{i}]", o, ws)
            _check_overlap(method, f"output_tensors[{i}]", o, f"input_tensors[{i}]", t)
        dtype, per = _WIRE[ins[0].dtype]
        self._run(method, lambda i, comm, stream: _capi.all_to_all(
            ins[i].data_ptr(), outs[i].data_ptr(), n // ws * per, dtype, comm.handle, stream))
        return outs

    # -- the uneven exchange: one tensor (and one count tensor) per GPU

    def _exchange_pairs(self, method, output_tensors, input_tensors):
        """(outs, ins, elements per row, bytes per row): one output and one input per GPU, each
        pair checked as the uneven exchange takes it, with one dtype and row shape on every GPU
        (the ranks must agree on the row's bytes)."""
        outs = self._count_list(method, "output_tensors", output_tensors)
        ins = self._count_list(method, "input_tensors", input_tensors)
        for i, (o, t) in enumerate(zip(outs, ins)):
            on, tn = f"output_tensors[{i}]", f"input_tensors[{i}]"
            _require_tensors(method, ((on, o), (tn, t)))
            row = _check_exchange(method, o, t, self.devices[i], (on, tn))
            _check_overlap(method, on, o, tn, t)
            if t.dtype != ins[0].dtype or t.shape[1:] != ins[0].shape[1:]:
                raise ValueError(
                    f"{method}: {tn} has rows of {tuple(t.shape[1:])} {t.dtype}, input_tensors[0] "
                    f"of {tuple(ins[0].shape[1:])} {ins[0].dtype}; every GPU's rows must match"
                )
        return outs, ins, row[0], row[1]

    def _count_tensors(self, method, name, tensors, length, length_text, required=True):
        """One int64 count tensor per GPU (tensors[i] on devices[i]), or, when not ``required``,
        None (no tensors) or a list whose entries may be None."""
        n = len(self.devices)
        if tensors is None:
            if required:
                raise ValueError(f"{method}: {name} is required (one int64 tensor per GPU)")
            return [None] * n
        ts = self._count_list(method, name, tensors)
        for i, t in enumerate(ts):
            what = f"{name}[{i}]"
            if t is None:
                if required:
                    raise TypeError(f"{method}: {what} must be a torch.Tensor, got None")
                continue
            _require_tensors(method, ((what, t),))
            _check_counts(method, what, t, length, length_text, self.devices[i])
        return ts

    def _per_gpu_splits(self, method, name, splits, tensors):
        """Split sizes per GPU: None (each tensor's even split), one list of ints for every GPU,
        or one list per GPU."""
        if splits is not None:
            if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
                raise TypeError(f"{method}: {name} must be None, a list of ints or one list per "
                                f"GPU, got {splits!r}")
            splits = list(splits)
            if any(_as_count(s) is None for s in splits):  # one list per GPU
                per_gpu = self._count_list(method, name, splits)
                return [_as_splits(method, f"{name}[{i}]", s, t, len(self.devices))
                        for i, (s, t) in enumerate(zip(per_gpu, tensors))]
        return [_as_splits(method, name, splits, t, len(self.devices)) for t in tensors]

    def _all_to_all_v(self, method, output_tensors, input_tensors, output_split_sizes,
                      input_split_sizes):
        outs, ins, row, _ = self._exchange_pairs(method, output_tensors, input_tensors)
        send = self._per_gpu_splits(method, "input_split_sizes", input_split_sizes, ins)
        recv = self._per_gpu_splits(method, "output_split_sizes", output_split_sizes, outs)
        n = len(self.devices)
        for i in range(n):
            for j in range(n):
                if recv[j][i] != send[i][j]:
                    raise ValueError(
                        f"{method}: GPU {i} sends {send[i][j]} rows to GPU {j} "
                        f"(input_split_sizes), which expects {recv[j][i]} from it "
                        "(output_split_sizes); they must agree"
                    )
        code, per_element = _moved_type(ins[0].dtype, ins[0].element_size())
        per_row = row * per_element
        send = [[c * per_row for c in s] for s in send]
        recv = [[c * per_row for c in r] for r in recv]
        self._run(method, lambda i, comm, stream: _capi.all_to_all_v(
            ins[i].data_ptr(), send[i], _packed(send[i]), outs[i].data_ptr(), recv[i],
            _packed(recv[i]), code, comm.handle, stream, nranks=n))
        return outs

    def all_to_all_device_counts(self, output_tensors, input_tensors, input_splits,
                                 output_splits=None, output_offsets=None):
        """All-to-all with counts on the device, one tensor per GPU: ``input_splits[i]`` (int64
        [world_size], rows) on GPU i, ``output_splits``/``output_offsets`` None or one int64
        [world_size] tensor (or None) per GPU. See Communicator.all_to_all_device_counts (the
        capacity of GPU i is output_tensors[i].size(0) rows; failures). Returns
        ``output_tensors``."""
        method = "SingleProcessCommunicator.all_to_all_device_counts"
        self._begin(method)
        n = len(self.devices)
        outs, ins, _, row_bytes = self._exchange_pairs(method, output_tensors, input_tensors)
        text = f"world_size ({n})"
        splits = self._count_tensors(method, "input_splits", input_splits, n, text)
        counts = self._count_tensors(method, "output_splits", output_splits, n, text, False)
        offsets = self._count_tensors(method, "output_offsets", output_offsets, n, text, False)
        if any(o is not None for o in offsets):
            _refuse_offsets_in_group(method)
        for i in range(n):
            _check_count_overlaps(method, ((f"input_splits[{i}]", splits[i]),
                                           (f"output_splits[{i}]", counts[i]),
                                           (f"output_offsets[{i}]", offsets[i])))
            if counts[i] is None and offsets[i] is not None:
                counts[i] = torch.empty(n, dtype=torch.int64, device=offsets[i].device)
        layouts = [_capi.expert_layout(row_bytes, 1, 1, o.shape[0], method, n, t.shape[0])
                   for o, t in zip(outs, ins)]
        self._run(method, lambda i, comm, stream: _capi.expert_dispatch(
            ins[i].data_ptr(), splits[i].data_ptr(), outs[i].data_ptr(), _ptr(counts[i]), None,
            layouts[i], comm.handle, stream))
        # After the group's launch, on each GPU's current stream (which _run joined to the launch).
        for c, o in zip(counts, offsets):
            if o is not None:
                _source_offsets(c, o)
        return outs

    def expert_dispatch(self, output_tensors, input_tensors, send_counts, local_experts, align=1,
                        recv_counts=None, expert_offsets=None):
        """Mixture-of-Experts dispatch, one tensor per GPU: ``send_counts[i]`` (int64
        [world_size * local_experts]) on GPU i; ``recv_counts``/``expert_offsets`` None or one
        tensor (or None) per GPU. See Communicator.expert_dispatch (layout, failures). Returns
        ``output_tensors``."""
        method = "SingleProcessCommunicator.expert_dispatch"
        self._begin(method)
        n, e = len(self.devices), local_experts
        _check_experts(method, e, align, n)
        outs, ins, _, row_bytes = self._exchange_pairs(method, output_tensors, input_tensors)
        sends = self._count_tensors(method, "send_counts", send_counts, n * e,
                                    f"world_size ({n}) x local_experts ({e})")
        recvs = self._count_tensors(method, "recv_counts", recv_counts, e * n,
                                    f"local_experts ({e}) x world_size ({n})", False)
        offs = self._count_tensors(method, "expert_offsets", expert_offsets, e + 1,
                                   f"local_experts ({e}) + 1", False)
        for i in range(n):
            _check_count_overlaps(method, ((f"send_counts[{i}]", sends[i]),
                                           (f"recv_counts[{i}]", recvs[i]),
                                           (f"expert_offsets[{i}]", offs[i])))
        layouts = [_capi.expert_layout(row_bytes, e, align, o.shape[0], method, n, t.shape[0])
                   for o, t in zip(outs, ins)]
        self._run(method, lambda i, comm, stream: _capi.expert_dispatch(
            ins[i].data_ptr(), sends[i].data_ptr(), outs[i].data_ptr(), _ptr(recvs[i]),
            _ptr(offs[i]), layouts[i], comm.handle, stream))
        return outs

    def expert_combine(self, output_tensors, input_tensors, send_counts, local_experts, align=1):
        """Mixture-of-Experts combine, one tensor per GPU (the inverse of ``expert_dispatch``:
        input_tensors in its output layout, capacity input_tensors[i].size(0) rows;
        ``send_counts``, ``local_experts``, ``align``: the dispatch's). Returns
        ``output_tensors``."""
        method = "SingleProcessCommunicator.expert_combine"
        self._begin(method)
        n, e = len(self.devices), local_experts
        _check_experts(method, e, align, n)
        outs, ins, _, row_bytes = self._exchange_pairs(method, output_tensors, input_tensors)
        sends = self._count_tensors(method, "send_counts", send_counts, n * e,
                                    f"world_size ({n}) x local_experts ({e})")
        layouts = [_capi.expert_layout(row_bytes, e, align, t.shape[0], method, n, o.shape[0])
                   for o, t in zip(outs, ins)]
        self._run(method, lambda i, comm, stream: _capi.expert_combine(
            ins[i].data_ptr(), sends[i].data_ptr(), outs[i].data_ptr(), layouts[i], comm.handle,
            stream))
        return outs

    def algo_info(self, tensors, op="sum", outs=None, *, collective="all_reduce", root=0):
        """What the call would run on each GPU: a list of yali.AlgoInfo (see
        Communicator.algo_info: ``collective``, ``root``, how the count is derived). Launches
        nothing."""
        method = "SingleProcessCommunicator.algo_info"
        tensors = list(tensors)
        outs = [None] * len(tensors) if outs is None else list(outs)
        return [_algo_info(c, method, t, op, o, collective, root, len(self.devices))
                for c, t, o in zip(self._open_comms("algo_info"), tensors, outs)]

    def register(self, tensors, nbytes=None):
        """yaliCommRegister of ``tensors[i]``'s whole storage (or ``nbytes`` from its data_ptr())
        on comm i, for every GPU (yali.register_all). Returns one yali.Registration."""
        method = "SingleProcessCommunicator.register"
        comms = self._open_comms("register")
        tensors = list(tensors)
        if len(tensors) != len(comms):
            raise ValueError(f"{method}: tensors has {len(tensors)} tensors, expected "
                             f"{len(comms)} (one per GPU)")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.device != torch.device("cuda", self.devices[i]):
                raise ValueError(f"{method}: tensors[{i}] must be a tensor on cuda:{self.devices[i]}")
        return yali.register_all(comms, tensors, nbytes)

    def empty_registered(self, shape, dtype=torch.float32):
        """One new uninitialized tensor per GPU (``[t0, t1, ...]``), registered on every comm.
        all_reduce on them (in place, or into registered ``outs``) runs zero-copy. They stay
        registered until ``deregister(tensors)`` or ``close()``."""
        ts = [_empty_on(shape, dtype, d, "SingleProcessCommunicator.empty_registered")
              for d in self.devices]
        self.register(ts)
        return ts

    def deregister(self, tensors_or_registration):
        """yaliCommDeregister on every comm, of a Registration or of the one holding the tensors
        (a list from ``empty_registered``, or its first tensor)."""
        comms = self._open_comms("deregister")
        _find_registration(comms[0].registrations, tensors_or_registration,
                           "SingleProcessCommunicator.deregister").deregister()

    def _open_comms(self, what):
        if not self.comms:
            raise _capi.python_error(yali.Result.InvalidUsage,
                                     f"SingleProcessCommunicator.{what}", "this communicator is closed")
        return self.comms

    def _check_async_errors(self, call):
        for i, c in enumerate(self.comms):
            _capi.check_async_error(c.handle, call, f"rank {i} (cuda:{self.devices[i]})")

    def _devices(self):
        return list(self.devices)

    def check_async_error(self):
        """Raise the YaliError subclass of the first comm's asynchronous error (YaliTimeout,
        YaliRemoteError, YaliInvalidUsage), naming the rank, with the library's message; return
        None while every comm is healthy. One host-memory read per comm; does not synchronize.

        Eager collectives raise that error themselves; a replayed CUDA graph does not (its YALI
        collectives write NaN into their outputs once a comm has failed). After replaying a graph,
        call this once the replay's work has finished and before trusting its outputs."""
        self._open_comms("check_async_error")
        self._check_async_errors("SingleProcessCommunicator.check_async_error")

    check = check_async_error  # reads well in a training loop: sp.check()

    def close(self):
        """Destroys every comm. Idempotent."""
        self._end(lambda c: c.destroy())

    def abort(self):
        """Aborts every comm (yaliCommAbort: prompt, waits for no peer), also after one of them
        failed to. Idempotent."""
        self._end(lambda c: c.abort())

    def _end(self, end):
        """Ends every comm with ``end`` (destroy or abort), each even after another failed to;
        then raises the first error."""
        comms, self.comms = self.comms, []
        errors = []
        for c in comms:
            _LIVE.pop(c.handle, None)
        for c in comms:
            try:
                end(c)
            except yali.YaliError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __repr__(self):
        return f"<yali.torch.SingleProcessCommunicator devices={self.devices}>"


# ---- CUDA graphs ---------------------------------------------------------------------------------


def check_all():
    """Raise the asynchronous error of any live YALI communicator of this process (every
    Communicator and SingleProcessCommunicator not yet closed): the YaliError subclass
    (YaliTimeout, YaliRemoteError, YaliInvalidUsage) with the library's message, naming the comm;
    return None while every one is healthy. One host-memory read per comm (yaliCommGetAsyncError,
    as ``check_async_error``); it does not synchronize.

    For work that runs YALI collectives without passing through YALI's host API, so that nothing
    raises there and a failed collective writes NaN into its output: replays of the CUDA graphs of
    ``torch.compile(mode="reduce-overhead")`` (CUDA-graph trees), or ``torch.cuda.CUDAGraph.replay()``
    called directly. Call it once the step's work has finished (after a synchronization such as
    ``loss.item()``) and before trusting its outputs; it needs no list of the comms the graphs
    hold."""
    for handle, comm in list(_LIVE.items()):
        _capi.check_async_error(handle, "yali.torch.check_all",
                                f"comm {handle:#x} (rank {comm.rank} of {comm.size}, "
                                f"cuda:{comm.device})")


def replay(graph, *comms, synchronize=False):
    """Replay ``graph`` (a torch.cuda.CUDAGraph holding YALI collectives) guarded by ``comms``
    (the Communicators / SingleProcessCommunicators, or yali.Comm, whose collectives it holds).

    A replay never passes through YALI's host API: after a failure its collectives write NaN into
    their outputs and raise nothing. This first raises any comm's asynchronous error
    (``check_async_error``), so that a failure of earlier work stops the loop before another replay;
    then replays on the current stream. With ``synchronize=True`` it then waits for the comms' GPUs
    (torch.cuda.synchronize) and checks again, so that on return the replay's outputs can be
    trusted; without it, check after your own synchronization (``comm.check()``)."""
    if not comms:
        raise TypeError("yali.torch.replay: name the communicators the graph uses, "
                        "replay(graph, comm, ...)")
    for c in comms:
        c.check_async_error()
    graph.replay()
    if synchronize:
        devices = []
        for c in comms:
            devs = c._devices() if hasattr(c, "_devices") else [c.device]
            devices += [d for d in devs if d not in devices]
        for d in devices:
            torch.cuda.synchronize(d)
        for c in comms:
            c.check_async_error()
