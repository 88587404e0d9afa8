"""Tensor hooks registered inside a captured call are refused.

``t.register_hook(fn)`` on a tensor the call computes changes the gradient autograd sends
back through ``t`` (a scaled, clipped or recorded gradient).  A captured graph's backward
is derived by AOTAutograd from its ops: the hook, registered on a fake tensor while the
call was captured, is in none of them, and the compiled call's gradient was the one
without the hook, silently.  While capturing, :class:`HooksRefused` sees the registration
(a ``__torch_function__`` of ``Tensor.register_hook``) and refuses the capture: the call
runs eagerly, with a warning naming the hook (``fallback="raise"``: ``CaptureError``).
``register_post_accumulate_grad_hook`` and ``retain_grad`` (whose tensor the caller never
sees: a graph returns other tensors) likewise.

So is a gradient computed inside the call (``torch.autograd.grad``, ``backward()``: a force
``-dE/dx`` as a model's output, a gradient penalty): the graph held the backward's ops as
traced on the capture's fake tensors, and the compiled call's value was eager's but the
gradient of what it returned was not (silently)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from matchbox._capture import NotCapturable

_HOOKS = {
    torch.Tensor.register_hook: "register_hook",
    torch.Tensor.register_post_accumulate_grad_hook: "register_post_accumulate_grad_hook",
    torch.Tensor.retain_grad: "retain_grad",
}


_GRADIENTS = {
    torch.autograd.grad: "torch.autograd.grad",
    torch.autograd.backward: "torch.autograd.backward",
    torch.Tensor.backward: "Tensor.backward",
}


def _name(hook: Any) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


class HooksRefused(TorchFunctionMode):
    """While capturing: a tensor hook's registration, or a gradient computed, refuses the
    capture."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        what = _HOOKS.get(func)
        if what is not None:
            hook = args[1] if len(args) > 1 else kwargs.get("hook")
            called = f"{what}({_name(hook)})" if hook is not None else f"{what}()"
            raise NotCapturable(
                f"the call registers a tensor hook, {called}: a graph's backward is derived "
                "from its ops and runs no hooks, so its gradient would be the one without "
                "the hook")
        what = _GRADIENTS.get(func)
        if what is not None:
            raise NotCapturable(
                f"the call computes a gradient ({what}): a graph holds the backward's ops as "
                "traced while it is captured, and the gradient of what the call returns "
                "would not be eager's")
        return func(*args, **kwargs)
