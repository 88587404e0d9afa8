"""Functions: calls between decorated functions (under masks), recursion, closures,
parameters of every kind, stacked decorators, decorated classes and methods."""

from __future__ import annotations

import functools
import types

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox.control import current_mask


@matchbox.batch
def grow(x):
    while x < 10:
        x = x * 2 + 1
    return x


@matchbox.batch
def caller(x):
    if x > 0:
        x = grow(x)  # runs only for the examples that took the branch
    else:
        x = -x
    return x


def test_oracle_call_to_a_decorated_function_under_a_mask():
    assert_oracle(caller, [-3, 1, 20], [3, 15, 20])


def test_callee_starts_from_the_callers_mask():
    seen = types.SimpleNamespace(mask=None)

    def record(mask):  # a plain function (one writing a list it closes over is refused)
        seen.mask = mask

    @matchbox.batch
    def callee(x):
        record(current_mask())
        return x + 1

    @matchbox.batch
    def f(x):
        if x > 0:
            x = callee(x)
        return x

    _, xb = scalars([-1.0, 2.0, 3.0])
    f(xb)
    assert seen.mask.tolist() == [False, True, True]
    assert current_mask() is None


@matchbox.batch
def factorial(n):
    if n <= 1:
        return n * 0 + 1
    return n * factorial(n - 1)


def test_oracle_recursion():
    assert_oracle(factorial, [0, 1, 3, 5], [1, 1, 6, 120], dtype=torch.int64)


@matchbox.batch
def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def test_recursion_with_two_calls(dtype):
    assert_oracle(fib, [0, 1, 2, 6, 7], [0, 1, 1, 8, 13], dtype=dtype)


def make_scaler(factor):
    @matchbox.batch
    def scale(x):
        if x > 0:
            x = x * factor
        return x
    return scale


def test_closures_keep_their_own_cells():
    double, triple = make_scaler(2), make_scaler(3)
    assert_oracle(double, [-1, 2], [-1, 4])
    assert_oracle(triple, [-1, 2], [-1, 6])


def test_closure_sees_later_changes_of_its_variables():
    factor = 2

    @matchbox.batch
    def scale(x):
        if x > 0:
            x = x * factor
        return x

    factor = 5  # noqa: F841  (read by the closure)
    assert_oracle(scale, [-1, 2], [-1, 10])


def test_any_function_or_closed_over_name_is_accepted():
    # The rewritten function is built from a template whose text holds these names; one
    # named like the template's placeholder ("body") was taken for it and refused.
    @matchbox.batch
    def body(x):
        return x * 2 if x > 0 else x

    factor = 3

    @matchbox.batch
    def scaled(x):
        if x > 0:
            x = x * factor * body(x)
        return x

    assert_oracle(body, [-1, 2], [-1, 4])
    assert_oracle(scaled, [-1, 2], [-1, 24])


@matchbox.batch
def parameters(x, y=2, *extra, z, w=3, **options):
    total = x * y
    for e in extra:
        total = total + e
    if total > options.get("limit", 0):
        total = total * z + w
    return total


def test_default_keyword_only_star_args_and_kwargs():
    xs, xb = scalars([-1.0, 0.5, 2.0])
    loop = [parameters(x, 3, 1.0, 2.0, z=10, limit=4).item() for x in xs]
    batched = parameters(xb, 3, 1.0, 2.0, z=10, limit=4)
    assert [e.item() for e in batched.examples()] == loop
    assert parameters(xs[2], z=1).item() == 7.0  # defaults: y=2, w=3
    assert parameters.__defaults__ == (2,)
    assert parameters.__kwdefaults__ == {"w": 3}


def test_nested_function_is_rewritten_too():
    @matchbox.batch
    def outer(x):
        def clip(v):
            if v > 1:
                v = v * 0 + 1
            return v
        return clip(x) * 2

    assert_oracle(outer, [0.5, 3.0], [1.0, 2.0])


@matchbox.batch
def with_a_decorated_inner_function(x):
    @matchbox.batch  # rewritten with the outer function already
    def step(h, xt):
        if xt.sum() > 0:
            return h + xt
        return h * 0.5

    h = x.new_zeros(1, 3)
    for xt in x.unbind(1):
        h = step(h, xt)
    return h, matchbox.batch(step)(h, h)  # decorating it again at run time is harmless


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5), (1,), (0,)])
def test_a_nested_function_decorated_too_equals_the_loop(lengths, dtype):
    # It raised "SyntaxError: duplicate argument 'mb__' in function definition" (a user
    # trial): its source was rewritten a second time, around code that already closed
    # over the runtime.
    assert_batch_equals_loop(with_a_decorated_inner_function, sequences(lengths, dtype=dtype))


def double_output(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


@double_output
@matchbox.batch
def batch_inside(x):
    if x > 0:
        x = x + 1
    return x


@matchbox.batch
@double_output
def batch_outside(x):
    if x > 0:
        x = x + 1
    return x


@pytest.mark.parametrize("f", [batch_inside, batch_outside])
def test_decorators_stacked_with_batch(f):
    assert_oracle(f, [-1, 2], [-2, 6])


def test_batch_outside_other_decorators_rewrites_the_innermost_function():
    assert "mb__.branch" in matchbox.control.source(batch_outside)
    assert batch_outside.__name__ == "batch_outside"


@matchbox.batch
class Stepper(torch.nn.Module):
    """A whole class decorated: every method, forward included, is rewritten."""

    def __init__(self, size):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(size, size) / size)
        self.limit = 1.0

    def step(self, xt, h):
        if xt.sum(-1) > 0:
            h = (xt @ self.w + h).tanh()
        return h

    def forward(self, x):
        h = x.batch_zeros(x.size(-1))
        for xt in x.unbind(1):
            h = self.step(xt, h)
            if h.sum(-1) > self.clipped(self.limit):
                break
        return h

    @staticmethod
    def clipped(value):
        return value if value < 2 else 2

    @classmethod
    def build(cls, size):
        return cls(size) if size > 0 else None

    @property
    def size(self):
        return self.w.size(0)


def test_decorated_class_equals_the_loop(dtype):
    model = Stepper.build(3).to(dtype)
    assert model.size == 3
    assert_batch_equals_loop(model, sequences([4, 0, 1, 3], dtype=dtype))


def test_decorated_class_methods_are_all_rewritten():
    source = matchbox.control.source(Stepper)
    for method in ("__init__", "step", "forward", "clipped", "build"):
        assert f"def {method}(" in source
    assert Stepper.forward.__matchbox_batch__


class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    @matchbox.batch
    def forward(self, x):
        y = super().__call__  # super() works in a rewritten method
        del y
        if x.sum() > 0:
            x = x * self.scale
        return x


def test_decorated_method_with_super(dtype):
    module = Module().to(dtype)
    xs = [torch.randn(1, 2, dtype=dtype) for _ in range(5)]
    assert_batch_equals_loop(module, (xs, MaskedBatch.fromlist(xs, (False,))))


def test_decorating_twice_is_the_same_function():
    assert matchbox.batch(grow) is grow


def test_decoration_happens_once_per_def():
    from matchbox.control import api

    first, second = make_scaler(2), make_scaler(3)
    assert first.__code__ is second.__code__  # one rewriting, two closures
    assert api._CACHE[first.__wrapped__.__code__].code is first.__code__
