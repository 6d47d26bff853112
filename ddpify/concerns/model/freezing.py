"""Parameters frozen or unfrozen around the wrap: DDP averages only those that required grad when it was built.

A model frozen whole where it would be wrapped is not wrapped (DDP refuses a module without
trainable parameters); parameters unfrozen after the wrap get a new wrap right after, where
the wrap's name and function allow it, and are refused otherwise (DDP306).
"""

from __future__ import annotations

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns.model.codes import UNFROZEN_AFTER_WRAP
from ddpify.concerns.model.reads import WrapperReads
from ddpify.engine import gates
from ddpify.engine.index import Ref
from ddpify.engine.program import Program


class Freezing:
    """Whether a model is frozen when it is wrapped, and where its parameters become trainable after."""

    def __init__(self, program: Program, reads: WrapperReads) -> None:
        self.program = program
        self.index = program.index
        self.reads = reads

    def frozen_when_wrapped(self, target: Ref, wrap: cst.BaseStatement) -> bool | None:
        """The whole model is frozen before the wrap: ``model.requires_grad_(False)`` or
        ``for p in model.parameters(): p.requires_grad = False`` (not a part: ``model.backbone``).

        None where it depends on a condition: frozen, then unfrozen only ``if args.finetune:``.
        """
        index = self.index
        states: list[tuple[bool, bool]] = []  # (frozen, only under a condition the wrap does not share)
        for read in index.mentions(index.scope_of(wrap), target):
            if index.after(read, wrap) and index.statement_of(read) is not wrap:
                continue
            attribute = index.parent(read)
            if not (isinstance(attribute, cst.Attribute) and attribute.value is read):
                continue
            call = index.parent(attribute)
            if not isinstance(call, cst.Call):
                continue
            name = attribute.attr.value
            conditional = self._conditional(read, wrap)
            if name == "requires_grad_":
                states.append((m.matches(call, m.Call(args=[m.Arg(m.Name("False"))])), conditional))
            elif name == "parameters":
                loop = index.parent(call)
                if isinstance(loop, cst.For) and loop.iter is call and isinstance(loop.target, cst.Name):
                    variable = loop.target.value
                    for node in index.walk(loop.body):
                        if _makes_trainable(node, frozenset({variable})):
                            states.append((False, conditional))
                        elif m.matches(
                            node,
                            m.Assign(
                                targets=[m.AssignTarget(m.Attribute(m.Name(variable), m.Name("requires_grad")))],
                                value=m.Name("False"),
                            )
                            | m.Call(
                                func=m.Attribute(m.Name(variable), m.Name("requires_grad_")),
                                args=[m.Arg(m.Name("False"))],
                            ),
                        ):
                            states.append((True, conditional))
            elif self._freezes_whole(name):  # ``backbone.freeze()``, a method of the program that freezes it all
                states.append((True, conditional))
        frozen: bool | None = False
        for state, conditional in states:
            frozen = None if conditional and frozen is not state else state
        return frozen

    def _freezes_whole(self, name: str) -> bool:
        """Every method of that name in the program's classes freezes all of ``self``'s parameters."""
        index = self.index
        methods = [f for (scope, n), f in index.functions.items() if n == name and isinstance(scope, cst.ClassDef)]
        return bool(methods) and all(self._method_freezes_self(method) for method in methods)

    def _method_freezes_self(self, method: cst.FunctionDef) -> bool:
        index = self.index
        own = index.self_name(method)
        if own is None:
            return False
        for node in index.walk(method.body):
            if isinstance(node, cst.For) and m.matches(
                node.iter, m.Call(func=m.Attribute(m.Name(own), m.Name("parameters")), args=[])
            ):
                names = frozenset(n.value for n in index.walk(node.target) if isinstance(n, cst.Name))
                if any(_makes_trainable(inner, names, value=False) for inner in index.walk(node.body)):
                    return True
            if _makes_trainable(node, None, value=False) and m.matches(
                node, m.Call(func=m.Attribute(m.Name(own), m.Name("requires_grad_")))
            ):
                return True
        return False

    def _conditional(self, read: cst.BaseExpression, wrap: cst.BaseStatement) -> bool:
        """Whether ``read`` runs only under an ``if`` (or in a loop) that does not also hold the wrap."""
        for ancestor in self.index.ancestors(read):
            if ancestor is self.index.scope_of(wrap) or self.index.inside(wrap, ancestor):
                return False
            if isinstance(ancestor, (cst.If, cst.While)) or (
                isinstance(ancestor, cst.For) and not self.index.inside(read, ancestor.iter)
            ):
                return True
        return False

    def unfrozen_after(self, target: Ref, wrap: cst.BaseStatement) -> tuple[cst.BaseStatement, ...]:
        """Where parameters of the model become trainable after the wrap.

        DDP averages only the parameters that required grad when it was built, so unfreezing
        after the wrap (``for p in model.backbone.parameters(): p.requires_grad = True``,
        ``model.backbone.requires_grad_(True)``) needs a new wrap right after it -- possible
        where the model's name is the one the wrap assigned, in the same function.
        """
        index = self.index
        wrap_scope = index.scope_of(wrap)
        found: list[cst.BaseStatement] = []
        reads = list(self.reads.reads_after_wrap(target, wrap))
        frozen_before = any(
            self._unfreezes(read, value=False) is not None
            for read in index.mentions(wrap_scope, target)
            if not index.after(read, wrap) or index.inside(read, wrap)
        ) or any(self._freezes_in_init(cls) for cls in set(index.constructed_classes(target)))
        for read in reads:
            statement = self._unfreezes(read)
            if statement is None and frozen_before and self._toggled_in_its_loop(read, reads):
                # frozen again in the loop that unfreezes (a warm-up on the head alone, then everything): the
                # parameters DDP registered at its last build get no gradient from then on, so it is built again
                statement = self._unfreezes(read, value=False)
            if statement is None or statement in found:
                continue
            if not frozen_before and self._toggled(statement, reads):
                continue  # a GAN's ``requires_grad`` toggled each step: DDP registered them all at the wrap
            if index.scope_of(statement) is not wrap_scope or index.ref_of(read, wrap_scope) != target:
                self.program.report(
                    statement,
                    UNFROZEN_AFTER_WRAP,
                    f"parameters of `{index.module.code_for_node(read)}` become trainable here, after the model is "
                    "wrapped in DistributedDataParallel, which averages only the parameters that required grad when "
                    "it was built: unfreeze in the function that wraps the model, or wrap it again after unfreezing",
                )
                continue
            found.append(statement)
        return tuple(found)

    def may_hold_no_parameter(self, target: Ref, wrap: cst.BaseStatement) -> bool:
        """The value at ``target`` is one of several classes of the program, one of which cannot be seen to hold a
        parameter (``criterion = ProxyAnchor(...)`` under one setting, ``MultiSimilarityLoss()`` of a library's
        loss under another), and the optimizer takes its parameters only under a test (``if args.loss ==
        "proxy": groups.append({"params": criterion.parameters()})``): DDP refuses a module without one, so the
        wrap asks at run time."""
        index = self.index
        classes = list(dict.fromkeys(index.constructed_classes(target)))
        if len(classes) < 2 or all(self._holds_parameters(cls) for cls in classes):
            return False
        reads = [
            read
            for read in index.mentions(index.scope_of(wrap), target)
            if isinstance(attribute := index.parent(read), cst.Attribute)
            and attribute.value is read
            and attribute.attr.value == "parameters"
            and next(index.enclosing_loops(read), None) is None  # where the optimizer is set up, not a warm-up's
        ]
        if not reads or not all(self._conditional(read, wrap) for read in reads):
            return False
        # ``if opt.optim == "adamw": AdamW(model.parameters()) else: SGD(model.parameters())``: taken either way
        for read in reads:
            innermost = next((a for a in index.ancestors(read) if isinstance(a, cst.If)), None)
            if innermost is None:
                continue
            chain = gates.chain_of(index, innermost)
            if isinstance(_last_else(chain), cst.Else) and all(
                any(index.inside(other, arm) for other in reads) for arm in gates.branches(chain)
            ):
                return False
        return True

    def _holds_parameters(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        """``__init__`` of the class (or of a base) builds an ``nn.Parameter``, a layer of torch with weights, or a
        module of the program that does."""
        index = self.index
        for owner in index.ancestry(cls):
            init = index.functions.get((owner, "__init__"))
            for node in index.walk(init.body) if init is not None else ():
                if not isinstance(node, cst.Call):
                    continue
                names = index.qualified_names(node.func)
                if names & torch_api.PARAMETER_CLASSES or any(
                    n.startswith("torch.nn.")
                    and n.count(".") == 2
                    and n not in torch_api.PARAMETER_FREE_LAYERS
                    and not n.endswith("Loss")
                    for n in names
                ):
                    return True
                local = index.local_class(node.func)
                if local is not None and local is not cls and depth < 4 and self._holds_parameters(local, depth + 1):
                    return True
        return False

    def _freezes_in_init(self, cls: cst.ClassDef) -> bool:
        """``__init__`` of the model's class (or of a base) freezes some of its parameters (``m.weight.requires_grad_
        (False)`` for each BatchNorm of a pretrained backbone): they are not trainable when the model is wrapped."""
        index = self.index
        for owner in index.ancestry(cls):
            init = index.functions.get((owner, "__init__"))
            if init is not None and any(_makes_trainable(node, None, value=False) for node in index.walk(init.body)):
                return True
        return False

    def _toggled_in_its_loop(self, read: cst.BaseExpression, reads: list[cst.BaseExpression]) -> bool:
        """``read`` freezes parameters, and the loop around it also unfreezes some."""
        loops = list(self.index.enclosing_loops(self.index.statement_of(read)))
        return (
            self._unfreezes(read, value=False) is not None
            and bool(loops)
            and any(self.index.inside(other, loops[-1]) and self._unfreezes(other) is not None for other in reads)
        )

    def _toggled(self, unfreeze: cst.BaseStatement, reads: list[cst.BaseExpression]) -> bool:
        """The same training loop also freezes the model again: ``requires_grad`` toggled every step."""
        loops = list(self.index.enclosing_loops(unfreeze))
        return bool(loops) and any(
            self.index.inside(read, loops[0]) and self._unfreezes(read, value=False) is not None for read in reads
        )

    def _unfreezes(self, read: cst.BaseExpression, value: bool = True) -> cst.BaseStatement | None:
        """The statement that makes parameters reached from ``read`` trainable (``value`` False: frozen)."""
        index = self.index
        for loop in index.enclosing_loops(read):
            # for p in model.backbone.parameters(): p.requires_grad = True
            if isinstance(loop, cst.For) and index.inside(read, loop.iter):
                names = frozenset(n.value for n in index.walk(loop.target) if isinstance(n, cst.Name))
                if any(_makes_trainable(node, names, value) for node in index.walk(loop.body)):
                    return loop
                return None
        statement = index.statement_of(read)
        node: cst.CSTNode = read
        while isinstance(parent := index.parent(node), (cst.Attribute, cst.Call)):
            if _makes_trainable(parent, None, value):  # model.backbone.requires_grad_(True)
                return statement
            node = parent
        return None


def _makes_trainable(node: cst.CSTNode, names: frozenset[str] | None, value: bool = True) -> bool:
    """``<name>.requires_grad = True`` or ``<name>.requires_grad_()`` / ``.requires_grad_(True)``.

    ``names`` None: any receiver. With ``value`` False: the freezing ``= False`` / ``requires_grad_(False)``.
    """
    literal = m.Name(str(value))
    arguments = m.Call(args=[m.Arg(literal)]) | m.Call(args=[]) if value else m.Call(args=[m.Arg(literal)])

    def receiver_is(value: cst.BaseExpression) -> bool:
        return names is None or (isinstance(value, cst.Name) and value.value in names)

    if isinstance(node, cst.Assign):
        return m.matches(node.value, literal) and any(
            isinstance(t.target, cst.Attribute)
            and t.target.attr.value == "requires_grad"
            and receiver_is(t.target.value)
            for t in node.targets
        )
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "requires_grad_"
        and receiver_is(node.func.value)
        and m.matches(node, arguments)
    )


def _last_else(chain: cst.If) -> cst.If | cst.Else | None:
    """The ``else`` that ends an ``if``/``elif`` chain, if it has one."""
    current: cst.If | cst.Else | None = chain
    while isinstance(current, cst.If):
        current = current.orelse
    return current
