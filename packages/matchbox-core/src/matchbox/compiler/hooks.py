"""Tensor hooks registered inside a captured call are refused.

``t.register_hook(fn)`` on a tensor the call computes changes the gradient autograd sends
back through ``t`` (a scaled, clipped or recorded gradient).  A captured graph's backward
is derived by AOTAutograd from its ops: the hook, registered on a fake tensor while the
call was captured, is in none of them, and the compiled call's gradient was the one
without the hook, silently.  While capturing, :class:`HooksRefused` sees the registration
(a ``__torch_function__`` of ``Tensor.register_hook``) and refuses the capture: the call
runs eagerly, with a warning naming the hook (``fallback="raise"``: ``CaptureError``).
``register_post_accumulate_grad_hook`` and ``retain_grad`` (whose tensor the caller never
sees: a graph returns other tensors) likewise."""

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


def _name(hook: Any) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


class HooksRefused(TorchFunctionMode):
    """While capturing: a tensor hook's registration refuses the capture."""

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
        return func(*args, **kwargs)
