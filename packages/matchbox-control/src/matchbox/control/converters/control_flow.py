"""Pass 5: ``if``, ``while`` and ``for`` in SIMT form.

Each body becomes a *region* run under an execution mask::

    mb__old_h_4 = h                      # save what the region merges
    with mb__.masked(mb__then_4):        # the region's mask is the current one
        h = f(h)                         # the body, with plain assignments
    h = mb__.merge(mb__then_4, mb__mask, h, mb__old_h_4, 'h')

- ``if test:``: ``mb__.branch(outer, test)`` splits the outer mask; a side no
  example takes is skipped; the then-side's merges are in place before the
  else-side runs, so each example sees exactly its own branch.
- ``while test:``: the loop runs while ``mb__.loop_mask`` says some example
  is still in it; an example that has left never comes back.
- ``for target in items:``: ``mb__.for_steps`` gives each step's mask (the
  examples that have the step, see ``runtime.iteration``); ``range`` and
  ``enumerate`` go through ``mb__.iter_range``/``iter_enumerate`` so that a
  range bound may be a batch of per-example sizes.

Which variables a region merges comes from liveness (assigned in the region
and live after it: for a loop, the loop-carried state and what is read
after the loop), not from "assigned in the body".  A region also guards the
gradients of the variables it reads (``mb__.guard``): what it computes for
the examples outside its mask is discarded, and its backward pass must not
send them gradient either (``x.log()`` for an example that failed ``if x >
0``, or a state combined with the NaN padding of a sequence that has ended
would send ``0 * nan``).  Under a plain condition the region's mask is the
outer mask, and merges and guards return at once: the code is plain Python.
"""

from __future__ import annotations

import copy
from typing import Any

import gast

from matchbox.control import anno, naming, templates
from matchbox.control.analysis import definitely, liveness, names
from matchbox.control.context import Context
from matchbox.control.converters import structured
from matchbox.control.converters.expressions import PLAIN

UNDEFINED = "undefined"  # on the function: names to bind to Undefined at its start

_ITERATORS = {"range": "iter_range", "enumerate": "iter_enumerate", "zip": "iter_zip",
              "reversed": "iter_reversed"}


class _ControlFlow:
    def __init__(self, function: Any, ctx: Context):
        liveness.analyze(function)
        definitely.analyze(function)
        self.locals = names.local_names(function)
        self.parameters = set(names.parameters(function))
        self.namer = ctx.namer
        self.undefined: set[str] = set()
        # A variable an enclosing region did not guard (it reads it only inside branches
        # of its own, which guard it): the mask its value was last guarded under.
        self.guarded_under: dict[str, str] = {}
        # Lists a top-level `for` captured as a scan may hand back stacked, with the calls
        # that read them (`structured.read_only_by_calls`).
        self.read_by_calls = structured.read_only_by_calls(function)
        self.top = {id(statement) for statement in function.body}

    def block(self, statements: list[Any], outer: str) -> list[Any]:
        out: list[Any] = []
        for statement in statements:
            out.extend(self.statement(statement, outer))
        return out

    def statement(self, node: Any, outer: str) -> list[Any]:
        if isinstance(node, gast.If) and not anno.get(node, PLAIN):
            return self.if_statement(node, outer)
        if isinstance(node, gast.While):
            return self.while_statement(node, outer)
        if isinstance(node, gast.For):
            return self.for_statement(node, outer)
        if isinstance(node, (gast.With, gast.If)):  # a user's `with`, a plain `if`
            node.body = self.block(node.body, outer)
            if isinstance(node, gast.If):
                node.orelse = self.block(node.orelse, outer)
        return [node]

    # ------------------------------------------------------------------ regions

    def region(self, mask: str, outer: str, body: list[Any], live_after: frozenset[str],
               defined: frozenset[str], origin: Any, prefix: list[Any] = ()) -> list[Any]:
        """``prefix + body`` run under ``mask``, with its saves, guards and merges."""
        statements = list(prefix) + list(body)
        # A variable whose items the region writes may be rebound too (a plain
        # tensor written per example becomes a batch): merged like an assignment.
        bound = names.block_writes(statements) & self.locals
        written = names.item_writes(statements) & self.locals - bound
        assigned = bound | written
        outputs = sorted(assigned & live_after)
        inputs = sorted(v for v in liveness.upward_exposed(statements) & self.locals
                        if not naming.is_reserved(v))
        kept = sorted(set(outputs) | set(inputs))
        self.undefined |= set(kept) - defined - self.parameters
        number = self.namer.number()
        # A variable read only inside the region's own branches is guarded there, each
        # side by its mask: a guard here too would cost a where on it, and its merge
        # after the region another (a shift-reduce step's whole stack, twice a step).
        direct = _reads_outside_branches(statements)
        under = {v: self.guarded_under.get(v, outer) for v in inputs}
        guarded = [v for v in inputs if v in direct]
        before = dict(self.guarded_under)
        for v in inputs:
            if v in direct:
                self.guarded_under.pop(v, None)
            else:
                self.guarded_under[v] = under[v]
        new_body = self.block(statements, mask)
        self.guarded_under = before
        # What a `for` captured as a scan (`for_statement`) takes and gives back (set after
        # the nested regions, which set their own).
        self.last_region = (outputs, [v for v in kept if v not in outputs], bool(written))

        def each(template: str, variables: list[str]) -> list[Any]:
            return [s for v in variables for s in templates.replace(
                template, origin=origin, var=v, saved=naming.saved(v, number),
                label=templates.constant(naming.label(v)), mask=mask, outer=outer)]

        guards = [s for v in guarded for s in templates.replace(
            "var = mb__.guard(mask, under, var)", origin=origin, var=v, mask=mask,
            under=under[v])]
        return (each("saved = var", kept) + guards
                + templates.replace("with mb__.masked(mask, outer):\n    body", origin=origin,
                                    mask=mask, outer=outer, body=new_body)
                + each("var = mb__.merge(mask, outer, var, saved, label)",
                       [v for v in outputs if v not in written])
                + each("var = mb__.merge_written(mask, outer, var, saved, label)",
                       [v for v in outputs if v in written])
                + each("var = saved", [v for v in inputs if v not in assigned]))

    # ------------------------------------------------------------------ statements

    def if_statement(self, node: Any, outer: str) -> list[Any]:
        then, orelse = self.namer.new("then"), self.namer.new("else")
        live = anno.get(node, liveness.LIVE_OUT)
        defined = anno.get(node, definitely.DEFINED_BEFORE)
        # The else side runs after the then side (SIMT: one after the other), so
        # what it reads must be merged out of the then side too, even where
        # nothing reads it after the if (`a` in `if c: a = ... else: out = a`).
        read_by_else = liveness.upward_exposed(node.orelse) if node.orelse else frozenset()
        then_region = self.region(then, outer, node.body, live | read_by_else, defined, node)
        result = templates.replace("""
            then, orelse = mb__.branch(outer, test)
            if then is not False:
                then_region
        """, origin=node, then=then, orelse=orelse, outer=outer, test=node.test,
            then_region=then_region)
        if node.orelse:
            else_region = self.region(orelse, outer, node.orelse, live, defined, node)
            result += templates.replace("if orelse is not False:\n    else_region",
                                        origin=node, orelse=orelse, else_region=else_region)
        return result

    def while_statement(self, node: Any, outer: str) -> list[Any]:
        mask = self.namer.new("loop")
        head = anno.get(node, liveness.LIVE_HEAD)
        defined = anno.get(node, definitely.DEFINED_BEFORE)
        body = self.region(mask, outer, node.body, head, defined, node)
        outputs, constants, written = self.last_region
        start = templates.replace("mask = mb__.loop_start(outer, test)", origin=node,
                                  mask=mask, outer=outer, test=copy.deepcopy(node.test))
        # The test of the next iteration runs only for the examples still in the loop.
        plain = templates.replace("""
            while mask is not False:
                body
                with mb__.masked(mask, outer):
                    mask = mb__.loop_mask(mask, test)
        """, origin=node, mask=mask, outer=outer, test=node.test, body=body)
        if written or not structured.may_scan(node):
            result = start + plain
        else:
            test_reads = sorted(v for v in names.reads(node.test) & self.locals
                                if not naming.is_reserved(v) and v not in outputs
                                and v not in constants)
            result = start + structured.while_as_scan(
                self.namer.new("loop"), dict(origin=node, mask=mask, outer=outer, body=body,
                                            test=node.test), outputs, constants + test_reads,
                plain, structured.appended_lists(node))
        return result + self.block(node.orelse, outer)

    def for_statement(self, node: Any, outer: str) -> list[Any]:
        step, item = self.namer.new("step"), self.namer.new("item")
        head = anno.get(node, liveness.LIVE_HEAD)
        defined = anno.get(node, definitely.DEFINED_BEFORE)
        target = templates.replace("target = item", origin=node, target=node.target, item=item)
        body = self.region(step, outer, node.body, head, defined, node, prefix=target)
        extra = anno.get(node, anno.EXTRA_TEST)
        subs = dict(origin=node, step=step, item=item, outer=outer, body=body,
                    items=_iterable(node.iter), extra=extra)
        outputs, constants, written = self.last_region
        if extra is None:
            plain = templates.replace("""
                for step, item in mb__.for_steps(items, outer):
                    body
            """, **subs)
        else:
            # Examples that broke out (or returned) leave the loop; it ends when
            # none of the running examples is left.
            plain = templates.replace("""
                for step, item in mb__.for_steps(items, outer):
                    step = mb__.narrow(step, extra)
                    if step is not False:
                        body
                    if not mb__.still_running(outer, extra):
                        break
            """, **subs)
        if written or not outputs or not structured.may_scan(node):
            result = plain
        else:
            appended = structured.appended_lists(node)
            stacked = [name for name in appended
                       if id(node) in self.top and name in self.read_by_calls]
            for name in stacked:
                for call in self.read_by_calls[name]:
                    call.func.attr = "call_steps"
                    _unheld(call)
            result = structured.for_as_scan(self.namer.new("loop"), subs, outputs,
                                            constants, plain, appended, stacked)
        return result + self.block(node.orelse, outer)


def _reads_outside_branches(statements: list[Any]) -> set[str]:
    """The names ``statements`` read other than inside the sides of their masked ``if``s
    (an ``if``'s test is read outside them; so is anything after it, such as a value
    the ``if`` merged)."""
    found: set[str] = set()
    for node in statements:
        if isinstance(node, gast.If) and not anno.get(node, PLAIN):
            found |= names.reads(node.test)
        else:  # a plain `if`'s sides run under the region's own mask
            found |= names.reads(node)
    return found


def _iterable(node: Any) -> Any:
    """``range``/``enumerate``/``zip``/``reversed`` calls through the runtime (batch
    bounds, each example's own counts and steps), nested ones included
    (``enumerate(zip(a, reversed(b)))``); an iterable held by a name, attribute or item
    (``for v in it``) through ``mb__.shared_iterable``, which refuses a shared iterator
    read under a per-example condition (``runtime.iterables``)."""
    if zip_of_rows(node):
        return rows_zipped(node)
    if (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id in _ITERATORS):
        helper = gast.Attribute(value=templates.name(naming.RUNTIME),
                                attr=_ITERATORS[node.func.id], ctx=gast.Load())
        args = node.args if node.func.id == "range" else [_iterable(arg) for arg in node.args]
        return gast.Call(func=helper, args=[templates.name(node.func.id)] + args,
                         keywords=list(node.keywords))
    if isinstance(node, (gast.Name, gast.Attribute, gast.Subscript)):
        return templates.replace_expr("mb__.shared_iterable(items)", origin=node, items=node)
    return node


def _unheld(call: Any) -> None:
    """``call``'s arguments without ``mb__.held`` (``builtin_calls``): ``call_steps`` is
    given the list a scanned loop appends to, which no iterator can be."""
    def bare(arg: Any) -> Any:
        if (isinstance(arg, gast.Call) and isinstance(arg.func, gast.Attribute)
                and isinstance(arg.func.value, gast.Name) and arg.func.value.id == naming.RUNTIME
                and arg.func.attr == "held"):
            return arg.args[0]
        return arg

    call.args = [bare(a) for a in call.args]
    for keyword in call.keywords:
        keyword.value = bare(keyword.value)


def zip_of_rows(node: Any) -> bool:
    """Whether ``node`` is ``zip(*rows)``: one starred argument, nothing else spread."""
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id == "zip" and len(node.args) == 1
            and isinstance(node.args[0], gast.Starred))


def rows_zipped(node: Any) -> Any:
    """``zip(*rows)`` as ``mb__.zip_rows(zip, rows)``: each example zips its own rows."""
    new = templates.replace_expr("mb__.zip_rows(zip_fn, rows)", origin=node, zip_fn=node.func,
                                 rows=node.args[0].value)
    new.keywords.extend(node.keywords)
    return new


def transform(function: Any, ctx: Context) -> None:
    flow = _ControlFlow(function, ctx)
    function.body = flow.block(function.body, naming.ENTRY_MASK)
    anno.set_(function, UNDEFINED, flow.undefined)
