"""Which arguments an ATen backward op's kernel reads, where that is fewer than it receives.

A backward op receives tensors it needs only for their shapes, or only under other output masks
or train flags: ``native_layer_norm_backward`` takes ``bias`` and never reads it. The dispatch mode
of :mod:`memaudit.capture.reads` counts every tensor argument of an op as read unless the op is in
:data:`ATEN_READS`; there, only the tensors its entry returns are reads.

Each entry takes the op's arguments as the dispatcher passes them (``*args, **kwargs`` by the op's
schema) and returns the tensors whose contents the kernel reads for those argument values. An entry
claims "not read" only where PyTorch's kernel source shows it (each cites the functions it mirrors,
in ``aten/src/ATen/native/``), only for the devices and backends whose kernels were read, and
returns every tensor argument anywhere else. "Read" means the values feed the op's outputs: a kernel
that copies an argument to a contiguous layout for its shape only (``expect_contiguous``) is not
counted as reading it. Every entry has a ground-truth test (``tests/capture/test_aten_reads.py``): poisoning
an argument the entry leaves out leaves the op's outputs bit for bit the same.

Ops checked and deliberately left out (each argument they receive then counts as read):

- ``mkldnn_rnn_layer_backward`` (CPU LSTM): ``mkldnn/RNN.cpp`` adds the two biases
  (``_shuffle_bias``) and passes them and ``hy_`` to ``ideep::lstm_backward::compute``; whether oneDNN
  reads them is oneDNN's code, not PyTorch's.
- ``embedding_dense_backward`` and ``native_dropout_backward`` read every tensor they receive
  (the gradient and the indices, the gradient and the mask): no entry is needed.
- ``native_batch_norm_backward`` in evaluation on CUDA (which statistics it reads depends on the
  kernel path) and ``convolution_backward`` on backends other than oneDNN and cuDNN (the slow CPU
  paths, CUDA depthwise, cuDNN transposed, MIOpen): left conservative.
- ``miopen_batch_norm_backward`` (ROCm, which nothing here runs), ``native_group_norm_backward``,
  ``_fused_rms_norm_backward``, ``_cudnn_rnn_backward`` and the scaled-dot-product attention
  backwards: not established from their kernels' source; left conservative.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

ReadSet = Callable[..., Iterable[torch.Tensor | None]]

_CONV_BACKEND: Any = getattr(torch._C, "_ConvBackend")  # noqa: B009 - not in torch's type stubs


def _bind(op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name (defaults filled in)."""
    schema = getattr(torch.ops.aten, op).default._schema
    out: dict[str, Any] = {}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only and i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            raise TypeError(f"aten.{op}: missing argument {a.name}")
    if len(args) > len(positional):
        raise TypeError(f"aten.{op}: {len(args)} positional arguments, the schema has {len(positional)}")
    return out


def _every(bound: Mapping[str, Any]) -> list[torch.Tensor]:
    """Every tensor argument (the conservative answer)."""
    out: list[torch.Tensor] = []
    for v in bound.values():
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, list | tuple):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def _dense_on(t: Any, devices: tuple[str, ...]) -> bool:
    """A plain strided tensor on one of ``devices`` (not nested, not mkldnn, not sparse)."""
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested and t.device.type in devices


def native_layer_norm_backward(*args: Any, **kwargs: Any) -> list[torch.Tensor | None]:
    """``bias`` is never read, on CPU and CUDA.

    ``layer_norm.cpp`` ``layer_norm_backward_cpu`` and ``cuda/layer_norm_kernel.cu``
    ``layer_norm_backward_cuda``: ``bias`` goes only to ``_check_layer_norm_inputs`` (shapes),
    ``bias.expect_contiguous()`` and ``empty_like``/``zeros_like`` for ``dbeta``;
    ``LayerNormBackwardKernel(..., dY, *X, mean, rstd, *gamma, M, N, &dX, &dgamma, &dbeta)`` (CPU)
    and ``LayerNormBackwardKernelImpl`` (CUDA) take no bias: ``dbeta`` is a sum of ``dY``.
    """
    b = _bind("native_layer_norm_backward", args, kwargs)
    if not _dense_on(b["input"], ("cpu", "cuda")):
        return list(_every(b))
    return [b["grad_out"], b["input"], b["mean"], b["rstd"], b["weight"]]


def native_batch_norm_backward(*args: Any, **kwargs: Any) -> list[torch.Tensor | None]:
    """Training reads the saved batch statistics and not the running ones (CPU and CUDA);
    evaluation on CPU reads the running statistics and not the saved ones. Evaluation on CUDA and
    other devices: every argument.

    CPU: ``Normalization.cpp`` ``batch_norm_backward_cpu`` -> ``batch_norm_backward_cpu_template``
    (``if (train) { mean = save_mean_a[f]; invstd = save_invstd_a[f]; } else { mean =
    running_mean_a[f]; invstd = 1 / std::sqrt(running_var_a[f] + eps); }``), and for contiguous
    and channels-last inputs ``cpu/batch_norm_kernel.cpp``
    ``batch_norm_cpu_backward_contiguous_impl`` and ``batch_norm_cpu_backward_channels_last_impl``
    (the same branch on ``train``); nothing else reads the four statistics.
    CUDA: ``cuda/Normalization.cu`` ``batch_norm_backward_cuda``: the fused path runs
    ``batch_norm_backward_kernel`` (``cuda/Normalization.cuh``: the same branch on ``train``);
    the other path takes ``mean``/``invstd`` from ``save_mean``/``save_invstd`` unless they are
    empty, and ``TORCH_CHECK(!train && ...)`` before falling back to the running statistics. In
    evaluation which of the two it reads depends on the path, so the entry keeps both.
    """
    b = _bind("native_batch_norm_backward", args, kwargs)
    train = bool(b["train"])
    if _dense_on(b["input"], ("cpu",)) or (train and _dense_on(b["input"], ("cuda",))):
        stats = ("save_mean", "save_invstd") if train else ("running_mean", "running_var")
        return [b["grad_out"], b["input"], b["weight"], *(b[s] for s in stats)]
    return list(_every(b))


def cudnn_batch_norm_backward(*args: Any, **kwargs: Any) -> list[torch.Tensor | None]:
    """``running_mean`` and ``running_var`` are never read (the op exists on CUDA only, and autograd
    calls it only in training: ``derivatives.yaml``, ``cudnn_batch_norm``).

    ``cudnn/BatchNorm.cpp`` ``cudnn_batch_norm_backward``: the two are declared "Unused: but we
    require them to be passed so that double backwards has access"; the body passes ``input``,
    ``grad_output``, ``weight``, ``save_mean``, ``save_var`` and ``reserveSpace`` to
    ``cudnnBatchNormalizationBackwardEx`` (or, in the cuDNN-frontend build, the first five to
    ``raw_cudnn_batchnorm_backward_out``) and nothing else.
    """
    b = _bind("cudnn_batch_norm_backward", args, kwargs)
    return [b["input"], b["grad_output"], b["weight"], b["save_mean"], b["save_var"], b["reserveSpace"]]


def convolution_backward(*args: Any, **kwargs: Any) -> list[torch.Tensor | None]:
    """With the oneDNN (mkldnn) backend on CPU, ``weight`` is read only for the input's gradient and
    ``input`` only for the weight's or the bias's; with the cuDNN backend on CUDA, ``weight`` only
    for the input's gradient and ``input`` only for the weight's. Other backends: every argument.

    ``Convolution.cpp`` ``convolution_backward``: ``case ConvBackend::Mkldnn`` (``contiguous``
    copies, then ``mkldnn_convolution_backward_stub``), and ``mkldnn/Conv.cpp``
    ``mkldnn_convolution_backward``: ``if (output_mask[0]) grad_input =
    mkldnn_convolution_backward_input(input.sizes(), grad_output, weight, ...)`` and ``if
    (output_mask[1] || output_mask[2]) ... mkldnn_convolution_backward_weights(weight.sizes(),
    grad_output, input, ...)``. ``case ConvBackend::Cudnn`` passes ``{output_mask[0],
    output_mask[1]}`` to ``cudnn_convolution_backward_stub`` ("Only make input contiguous when it
    is necessary for the backwards computation": ``output_mask[1] ? input.contiguous(...) :
    input``), and the bias's gradient is ``grad_output.sum(...)`` after the switch;
    ``cudnn/ConvShared.cpp`` ``cudnn_convolution_backward``: ``if (output_mask[0]) grad_input =
    cudnn_convolution_backward_input(input.sizes(), grad_output, weight, ...)``, ``if
    (output_mask[1]) grad_weight = cudnn_convolution_backward_weight(weight.sizes(), grad_output,
    input, ...)`` (the index holds this file from an older release than torch 2.14; the gpu test
    poisons it). The backend is the one ``select_conv_backend`` picks, as
    ``torch._C._select_conv_backend`` answers: its ``need_backward`` only rules out XNNPACK and
    Winograd, which come after cuDNN and oneDNN in the choice.
    """
    b = _bind("convolution_backward", args, kwargs)
    inp, weight, mask = b["input"], b["weight"], list(b["output_mask"])
    device = inp.device.type if isinstance(inp, torch.Tensor) else None
    if device not in ("cpu", "cuda") or not (_dense_on(inp, (device,)) and _dense_on(weight, (device,))):
        return list(_every(b))
    backend = torch._C._select_conv_backend(
        inp,
        weight,
        None,
        list(b["stride"]),
        list(b["padding"]),
        list(b["dilation"]),
        bool(b["transposed"]),
        list(b["output_padding"]),
        b["groups"],
        None if b["bias_sizes"] is None else list(b["bias_sizes"]),
    )
    out: list[torch.Tensor | None] = [b["grad_output"]]
    if device == "cpu" and backend == _CONV_BACKEND.Mkldnn:
        needs_input = mask[1] or mask[2]
    elif device == "cuda" and backend == _CONV_BACKEND.Cudnn:
        needs_input = mask[1]
    else:
        return list(_every(b))
    if mask[0]:
        out.append(weight)
    if needs_input:
        out.append(inp)
    return out


ATEN_READS: dict[str, ReadSet] = {
    "native_layer_norm_backward": native_layer_norm_backward,
    "native_batch_norm_backward": native_batch_norm_backward,
    "cudnn_batch_norm_backward": cudnn_batch_norm_backward,
    "convolution_backward": convolution_backward,
}
"""Overload-packet name (``func.overloadpacket.__name__``) -> the tensors its kernel reads."""
