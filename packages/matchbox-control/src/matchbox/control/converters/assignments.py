"""Pass 6: writes that must be masked where they happen.

Local variables are merged when their region ends (pass 5).  Writes to
objects that outlive the region are masked at once, with the mask of the
innermost region around them (the ``with mb__.masked(mask):`` blocks pass 5
left; the function's entry mask outside them):

| written                    | becomes                                              |
|----------------------------|------------------------------------------------------|
| ``obj.attr = v``           | ``mb__.set_attr(mask, obj, 'attr', v)``              |
| ``obj[i] = v``             | ``mb__.set_item(mask, obj, i, v)``                   |
| ``x[i] = v``, ``x`` a local| ``x = mb__.set_item(mask, x, i, v, 'x')`` (a plain   |
|                            | tensor becomes a batch where the write differs)      |
| ``a, obj.attr = v``        | ``mb__value_n = v; a, mb__value_m = mb__value_n; ...``|
| ``x += v``                 | ``x = mb__.aug_assign(mask, '+=', x, v, 'x')``       |
| ``obj.attr += v``          | ``mb__.aug_attr(mask, '+=', obj, 'attr', v)``        |
| ``obj[i] += v``            | ``mb__.aug_item(mask, '+=', obj, i, v)``             |
| ``del obj[i]``             | ``mb__.delete_item(mask, obj, i)``                   |
| ``obj.append(v)``,         | ``mb__.call_method(mask, obj, 'append', v)``         |
| ``obj.add_(v)``, ``obj.pop()``| (statements and expressions; every in-place tensor |
|                            | method, every list/dict method that writes)          |

See ``runtime.effects`` for what each does under a mask (with no mask, each
is the Python statement itself).
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import naming, templates
from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.runtime.effects import LIST_AND_DICT_WRITES

_AUGMENTED = {
    gast.Add: "+=", gast.Sub: "-=", gast.Mult: "*=", gast.Div: "/=", gast.FloorDiv: "//=",
    gast.Mod: "%=", gast.Pow: "**=", gast.MatMult: "@=", gast.BitAnd: "&=",
    gast.BitOr: "|=", gast.BitXor: "^=", gast.LShift: "<<=", gast.RShift: ">>=",
}


def _is_mask_block(node: Any) -> str | None:
    """The mask name of a ``with mb__.masked(mask):`` block, else None."""
    if len(node.items) != 1:
        return None
    call = node.items[0].context_expr
    if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
            and isinstance(call.func.value, gast.Name) and call.func.value.id == naming.RUNTIME
            and call.func.attr == "masked" and isinstance(call.args[0], gast.Name)):
        return call.args[0].id
    return None


def _changes_in_place(call: Any) -> bool:
    if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)):
        return False
    owner, attr = call.func.value, call.func.attr
    if isinstance(owner, gast.Name) and owner.id == naming.RUNTIME:
        return False
    return attr in LIST_AND_DICT_WRITES or (attr.endswith("_") and not attr.startswith("_"))


def _writes_object(target: Any) -> bool:
    """Whether an assignment target stores into an attribute or an item."""
    return any(isinstance(n, (gast.Attribute, gast.Subscript)) and isinstance(n.ctx, gast.Store)
               for n in gast.walk(target))


def index_expression(node: Any) -> Any:
    """A subscript's index as an expression (``a:b`` becomes ``slice(a, b)``)."""
    if isinstance(node, gast.Slice):
        parts = [p if p is not None else templates.constant(None)
                 for p in (node.lower, node.upper, node.step)]
        return templates.replace_expr("mb__.slice_(a, b, c)", origin=node, a=parts[0],
                                      b=parts[1], c=parts[2])
    if isinstance(node, gast.Tuple):
        return gast.Tuple(elts=[index_expression(e) for e in node.elts], ctx=gast.Load())
    return node


class _Assignments(names.ScopeTransformer):
    def __init__(self, ctx: Context, locals_: set[str]):
        self.ctx = ctx
        self.locals = locals_
        self.masks = [naming.ENTRY_MASK]

    def _local(self, node: Any) -> bool:
        """Whether ``node`` is a local variable of the function, which a write may rebind
        (a global or a closed-over name may not be: assigning it would make it local)."""
        return isinstance(node, gast.Name) and node.id in self.locals

    def visit_Lambda(self, node: Any) -> Any:
        # A thunk (a comprehension's step, a side of a conditional expression, a
        # later operand of and/or) runs under a mask that only the runtime knows, and
        # so does a user's lambda, run whenever it is called (``push = lambda v:
        # items.append(v)``): their writes read it from the context.
        self.masks.append(templates.replace_expr("mb__.entry_mask()", origin=node))
        try:
            return self.generic_visit(node)
        finally:
            self.masks.pop()

    def visit_With(self, node: Any) -> Any:
        mask = _is_mask_block(node)
        if mask is None:
            return self.generic_visit(node)
        self.masks.append(mask)
        try:
            return self.generic_visit(node)
        finally:
            self.masks.pop()

    @property
    def mask(self) -> Any:
        return self.masks[-1]

    def visit_Assign(self, node: Any) -> Any:
        node.value = self.visit(node.value)
        if not any(_writes_object(t) for t in node.targets):
            return node
        if len(node.targets) == 1 and isinstance(node.targets[0], (gast.Attribute, gast.Subscript)):
            return self.store(node.targets[0], node.value, node)
        value = self.ctx.namer.new("value")
        result = templates.replace("value = v", origin=node, value=value, v=node.value)
        for target in node.targets:
            result += self.unpack(target, templates.name(value), node)
        return result

    def visit_AnnAssign(self, node: Any) -> Any:
        if node.value is not None:
            node.value = self.visit(node.value)
        if node.value is None or isinstance(node.target, gast.Name):
            return node
        return self.store(node.target, node.value, node)

    def unpack(self, target: Any, value: Any, origin: Any) -> list[Any]:
        if isinstance(target, gast.Name):
            return templates.replace("target = value", origin=origin, target=target, value=value)
        if isinstance(target, (gast.Attribute, gast.Subscript)):
            return self.store(target, value, origin)
        # A tuple/list target: stand-ins for the attribute and subscript parts.
        later: list[Any] = []

        def stand_in(element: Any) -> Any:
            if isinstance(element, gast.Starred):
                return gast.Starred(value=stand_in(element.value), ctx=gast.Store())
            if isinstance(element, (gast.Tuple, gast.List)):
                return type(element)(elts=[stand_in(e) for e in element.elts], ctx=gast.Store())
            if isinstance(element, (gast.Attribute, gast.Subscript)):
                temporary = self.ctx.namer.new("value")
                later.append((element, temporary))
                return templates.name(temporary, gast.Store())
            return element

        simple = stand_in(target)
        result = templates.replace("target = value", origin=origin, target=simple, value=value)
        for element, temporary in later:
            result += self.store(element, templates.name(temporary), origin)
        return result

    def store(self, target: Any, value: Any, origin: Any) -> list[Any]:
        if isinstance(target, gast.Attribute):
            return templates.replace("mb__.set_attr(mask, obj, attr, value)", origin=origin,
                                     mask=self.mask, obj=target.value,
                                     attr=templates.constant(target.attr), value=value)
        if self._local(target.value):
            # A local variable: a plain tensor it holds may become a batch (the
            # write differs between examples), which the variable then holds.
            return templates.replace("var = mb__.set_item(mask, var, index, value, label)",
                                     origin=origin, mask=self.mask, var=target.value.id,
                                     index=index_expression(target.slice), value=value,
                                     label=templates.constant(target.value.id))
        return templates.replace("mb__.set_item(mask, obj, index, value)", origin=origin,
                                 mask=self.mask, obj=target.value,
                                 index=index_expression(target.slice),
                                 value=value)

    def visit_Delete(self, node: Any) -> Any:
        if not any(isinstance(t, gast.Subscript) for t in node.targets):
            return node
        result: list[Any] = []
        for target in node.targets:
            if isinstance(target, gast.Subscript):
                result += templates.replace("mb__.delete_item(mask, obj, index)", origin=node,
                                            mask=self.mask, obj=target.value,
                                            index=index_expression(target.slice))
            else:
                result.append(gast.copy_location(gast.Delete(targets=[target]), node))
        return result

    def visit_AugAssign(self, node: Any) -> Any:
        node.value = self.visit(node.value)
        op = templates.constant(_AUGMENTED[type(node.op)])
        target = node.target
        if isinstance(target, gast.Name):
            return templates.replace("var = mb__.aug_assign(mask, op, var, value, label)",
                                     origin=node, var=target.id, mask=self.mask, op=op,
                                     value=node.value, label=templates.constant(target.id))
        if isinstance(target, gast.Attribute):
            return templates.replace("mb__.aug_attr(mask, op, obj, attr, value)", origin=node,
                                     mask=self.mask, op=op, obj=target.value,
                                     attr=templates.constant(target.attr), value=node.value)
        if self._local(target.value):
            return templates.replace(
                "var = mb__.aug_item(mask, op, var, index, value, label)", origin=node,
                mask=self.mask, op=op, var=target.value.id,
                index=index_expression(target.slice), value=node.value,
                label=templates.constant(target.value.id))
        return templates.replace("mb__.aug_item(mask, op, obj, index, value)", origin=node,
                                 mask=self.mask, op=op, obj=target.value,
                                 index=index_expression(target.slice), value=node.value)

    def visit_Call(self, node: Any) -> Any:
        # A statement (``z.mul_(3)``, ``items.append(v)``) or an expression
        # (``top = stack.pop()``, ``y = z.add_(1)``).
        self.generic_visit(node)
        if not _changes_in_place(node):
            return node
        new = templates.replace_expr("mb__.call_method(mask, obj, attr)", origin=node,
                                     mask=self.mask, obj=node.func.value,
                                     attr=templates.constant(node.func.attr))
        new.args.extend(node.args)
        new.keywords.extend(node.keywords)
        return new


def transform(function: Any, ctx: Context) -> None:
    visitor = _Assignments(ctx, names.local_names(function))
    body: list[Any] = []
    for statement in function.body:
        result = visitor.visit(statement)
        body.extend(result if isinstance(result, list) else [result])
    function.body = body
