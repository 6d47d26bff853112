"""Which tensors hold the samples: the model's input and the targets made from the same rows.

A tensor is recognised by what it is -- made by torch before the training loop, read by the model or
compared with its output -- never by its name; its rows must be shown to come from the input's, and a
random choice of samples in its making must be seeded.
"""

from __future__ import annotations

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns.tensors.lineage import Refused, _code, _Lineage, _StepReader, _value_of
from ddpify.engine.index import Ref, Scope, constant_key, string_key
from ddpify.engine.syntax import assigned
from ddpify.engine.uniformity.sources import NOT_NUMPY_DRAWS, NUMPY_GENERATORS

# torch calls that do not make a data tensor.
NOT_TENSORS = ("torch.nn.", "torch.optim.", "torch.utils.", "torch.cuda.", "torch.distributed.", "torch.backends.")
NOT_TENSOR_CALLS = frozenset({"torch.device", "torch.Generator", "torch.manual_seed", "torch.load", "torch.no_grad"})
# numpy functions that make no array of data: generators, seeds, the global generator's state.
NOT_ARRAYS = NOT_NUMPY_DRAWS | {"numpy.random.set_state", "numpy.dtype", "numpy.finfo", "numpy.iinfo"}
# Calls that give the same rows as another type: an array as a tensor, a list as an array.
CONVERSIONS = frozenset(
    {"torch.from_numpy", "torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor"}
    | {"numpy.asarray", "numpy.array", "torch.stack", "numpy.stack"}
)
# Factories whose first argument is the number of rows: ``torch.randn(n, 8)``, ``torch.zeros((n, 1))``,
# ``np.random.randn(n, 8)``, ``np.zeros((n, 1))``.
SIZED_FACTORIES = frozenset(
    f"torch.{name}" for name in ("randn", "rand", "zeros", "ones", "empty", "full", "normal", "Tensor", "FloatTensor")
) | frozenset(
    f"numpy.{name}" for name in ("zeros", "ones", "empty", "full", "random.randn", "random.rand", "random.random")
)
# Matrix products: what they give may hold pairs of samples (``torch.mm(x, x.t())``), not one row per sample.
_PRODUCTS = frozenset({"torch.mm", "torch.matmul", "torch.bmm", "torch.cdist", "numpy.dot", "numpy.matmul"})
# Random choices of samples: each rank would choose differently without a seed.
RANDOM_CHOICES = frozenset(
    {
        "torch.randperm",
        "torch.randint",
        "torch.multinomial",
        "numpy.random.permutation",
        "numpy.random.shuffle",
        "numpy.random.choice",
        "numpy.random.randint",
        "random.shuffle",
        "random.sample",
        "random.choices",
        "sklearn.model_selection.train_test_split",
    }
)


class _SampleFinder(_StepReader):
    """The data tensors the loss reads, told apart from models, scalars and configuration."""

    def _tensors(self, lineage: _Lineage, scope: Scope) -> tuple[dict[Ref, list[cst.Name]], Ref | None]:
        """The data tensors the loss is computed from, with their reads, and the one the model is called on."""
        index = self.index
        tensors: dict[Ref, list[cst.Name]] = {}
        inputs: set[Ref] = set()
        for leaf in lineage.leaves:
            ref = self._data_ref(leaf)
            if ref is None:
                continue
            if ref.scope is not scope and not isinstance(ref.scope, cst.Module) and not index.inside(scope, ref.scope):
                raise Refused(leaf, f"`{leaf.value}` comes from another function")
            tensors.setdefault(ref, []).append(leaf)
            if self._model_input(leaf):
                inputs.add(ref)
        if not inputs:
            return tensors, None
        # several inputs (``net(s1, s2)``): each must hold the rows the first holds, chosen by the same
        # index (``train["s2"][perm]`` beside ``train["s1"][perm]``); a row count in common is not enough (a
        # graph's adjacency matrix has as many rows as its features), nor a tensor in common
        first, *others = sorted(inputs, key=lambda r: min(index.order[n] for n in tensors[r]))
        chosen = {root for root in self._roots(first, strict=True) if isinstance(root, tuple) and root[0] == "chosen"}
        for other in others:
            if not (self._roots(other, strict=True) & chosen):
                names = ", ".join(f"`{ref.path}`" for ref in sorted(inputs, key=lambda r: r.path))
                raise Refused(
                    tensors[other][0],
                    f"the model is called on several tensors ({names}): ddpify cannot tell which "
                    "of them hold one row per sample",
                )
        roots = self._roots(first)
        for ref, reads in tensors.items():
            if ref.scope is not first.scope:
                raise Refused(reads[0], f"`{ref.path}` and `{first.path}` are made in different functions")
            if ref != first and not (self._roots(ref) & roots):
                raise Refused(
                    reads[0],
                    f"`{ref.path}` cannot be shown to hold one row per sample of "
                    f"`{first.path}`, so it cannot be sharded with it",
                )
            roots |= self._roots(ref)
        for root in roots:
            if isinstance(root, Ref):
                for assignment in self._assignments(root):
                    self._check_seeded(assignment)
        return tensors, first

    # -- what the leaves hold ---------------------------------------------
    def _data_ref(self, leaf: cst.Name) -> Ref | None:
        """The place ``leaf`` reads, when it holds a data tensor; None for models, functions, scalars."""
        index = self.index
        parent = index.parent(leaf)
        if isinstance(parent, cst.Call) and parent.func is leaf:
            return None  # a function, a model or a loss module
        if index.qualified_names(leaf):
            return None  # an import or a builtin
        ref = index.ref_of(leaf, index.scope_of(leaf))
        if ref is None or ref in self.model_refs:
            return None
        parent = index.parent(leaf)
        mover = index.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(mover, cst.Call) and m.matches(mover.func, m.Attribute(attr=m.Name("to") | m.Name("cuda"))):
            return None  # ``x.to(device)``: where the data goes, not data
        assignments = list(self._assignments(ref))
        if not assignments:
            if self._is_parameter(ref) and not self._in_bounds(leaf):
                shown: cst.BaseExpression = leaf  # ``self.train_loader``, not ``self``
                while isinstance(up := index.parent(shown), (cst.Attribute, cst.Subscript)) and up.value is shown:
                    shown = up
                if isinstance(call := index.parent(shown), cst.Call) and call.func is shown:
                    return None  # ``self.criterion(out, y)``: a loss module or a method, not data
                raise Refused(
                    leaf, f"`{_code(index, shown)}` reaches the training step through a parameter of its function"
                )
            return None  # a slice bound or batch size, or a global of another module
        if self._is_tensor(leaf, index.scope_of(leaf), 0) or self._is_example_list(assignments):
            return ref
        if all(self._model_state(a.value) for a in assignments):
            return None  # ``hidden = model.init_hidden(bsz)``: the model's state, not data
        if self._in_bounds(leaf):
            return None  # a number of batches, a batch size
        if self._model_input(leaf):
            raise Refused(leaf, f"ddpify cannot tell what the model's input `{leaf.value}` holds")
        if (
            (isinstance(parent, cst.Attribute) and parent.value is leaf)
            or (isinstance(parent, cst.Arg) and parent.keyword is not None)
            or all(_is_constant(a.value) or self._is_other_object(a.value) for a in assignments)
        ):
            return None  # a configuration object (``args.alpha``), a keyword argument, a constant, a device
        raise Refused(
            leaf, f"ddpify cannot tell whether `{leaf.value}`, which the loss reads, holds one row per sample"
        )

    def _model_state(self, expr: cst.BaseExpression | None) -> bool:
        """A method of a model called: ``model.init_hidden(bsz)``."""
        index = self.index
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and index.root_ref(expr.func.value, index.scope_of(expr)) in self.model_refs
        )

    def _in_bounds(self, leaf: cst.Name) -> bool:
        """Whether ``leaf`` is read in a slice or a ``range(...)``: a bound or a step, not data."""
        for ancestor in self.index.ancestors(leaf):
            if isinstance(ancestor, cst.SubscriptElement) or (
                isinstance(ancestor, cst.Call) and self.index.qualified_names(ancestor.func) == {"builtins.range"}
            ):
                return True
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _is_other_object(self, expr: cst.BaseExpression | None) -> bool:
        """A call to an imported function that makes no tensor: ``torch.device(...)``, ``nn.MSELoss()``."""
        if not isinstance(expr, cst.Call):
            return False
        names = self.index.qualified_names(expr.func)
        return (
            bool(names)
            and not any(
                n.startswith("torch.") and not n.startswith(NOT_TENSORS) and n not in NOT_TENSOR_CALLS for n in names
            )
            and not any(n.startswith("numpy.") for n in names)
        )

    def _is_parameter(self, ref: Ref) -> bool:
        scope = ref.scope
        if not isinstance(scope, cst.FunctionDef):
            return False
        params = scope.params
        every = (*params.posonly_params, *params.params, *params.kwonly_params)
        return any(p.name.value == ref.path for p in every)

    def _is_tensor(self, expr: cst.BaseExpression, scope: Scope, depth: int) -> bool:
        """Whether ``expr`` makes a tensor with torch (through names assigned such a tensor too)."""
        index = self.index
        if depth > 6:
            return False
        if isinstance(expr, cst.Call):
            names = index.qualified_names(expr.func)
            if names:
                return any(
                    (n.startswith("torch.") and not n.startswith(NOT_TENSORS) and n not in NOT_TENSOR_CALLS)
                    or (n.startswith("numpy.") and n not in NOT_ARRAYS)
                    for n in names
                )
            if isinstance(expr.func, cst.Attribute):  # x.float(), x.to(device), x.unsqueeze(1), rng.rand(n, 1)
                return self._is_tensor(expr.func.value, scope, depth + 1) or self._numpy_generator(expr.func.value)
            return False
        if isinstance(expr, cst.BinaryOperation):
            return self._is_tensor(expr.left, scope, depth + 1) or self._is_tensor(expr.right, scope, depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self._is_tensor(expr.expression, scope, depth + 1)
        if isinstance(expr, cst.Comparison):  # (x.sum(1) > 0).long()
            return self._is_tensor(expr.left, scope, depth + 1)
        if isinstance(expr, cst.Subscript):
            item = self._dict_item(expr, scope)
            if item is not None:  # ``train["label"]`` of ``train = {"s1": ..., "label": np.random.randint(...)}``
                return self._is_tensor(item, scope, depth + 1)
            return self._is_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
            return self._is_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, cst.Name):
            ref = index.ref_of(expr, scope)
            if ref is None:
                return False
            # the value it holds where it is read: the last assignment before (``x = x.to(device)`` reads the one before)
            assignments = [a for a in self._assignments(ref) if index.after(expr, a)]
            if not assignments:
                return False
            last = max(assignments, key=lambda a: index.order[a])
            value = _value_of(last, ref)
            return value is not None and self._is_tensor(value, index.scope_of(last), depth + 1)
        return False

    def _dict_item(self, expr: cst.Subscript, scope: Scope) -> cst.BaseExpression | None:
        """The value a dict display gives ``key`` for ``name["key"]``, where every value ``name`` is
        assigned is such a display with that key."""
        key = string_key(expr)
        ref = self.index.ref_of(expr.value, scope) if isinstance(expr.value, cst.Name) and key is not None else None
        values = [_value_of(a, ref) for a in self._assignments(ref)] if ref is not None else []
        items = [
            element.value
            for value in values
            if isinstance(value, cst.Dict)
            for element in value.elements
            if isinstance(element, cst.DictElement) and constant_key(element.key) == key
        ]
        return items[0] if values and len(items) == len(values) == 1 else None

    def _is_example_list(self, assignments: list[cst.Assign | cst.AugAssign | cst.AnnAssign]) -> bool:
        """A Python list made by a comprehension: one item per example (``[(x, y) for ... in ...]``)."""
        return bool(assignments) and all(isinstance(a.value, cst.ListComp) for a in assignments)

    def _numpy_generator(self, expr: cst.BaseExpression) -> bool:
        """``rng`` after ``rng = np.random.RandomState(0)`` (or ``default_rng``): what its methods draw are arrays."""
        index = self.index
        ref = index.ref_of(expr, index.scope_of(expr)) if isinstance(expr, cst.Name) else None
        assignments = list(self._assignments(ref)) if ref is not None else []
        return bool(assignments) and all(
            isinstance(value := _value_of(a, ref), cst.Call) and index.qualified_names(value.func) & NUMPY_GENERATORS
            for a in assignments
            if ref is not None
        )

    def _model_input(self, leaf: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``leaf`` is what a model is called on: ``model(x)``, ``model(x.to(device)[:, :3])``, or
        ``xb = x[idx]`` before ``model(xb)``."""
        index = self.index
        child: cst.CSTNode = leaf
        for parent in index.ancestors(leaf):
            if parent is child:
                continue  # the conversion call stepped over below
            if isinstance(parent, cst.Assign) and parent.value is child and depth < 4:
                return any(
                    self._model_input(read, depth + 1)
                    for target in self._targets_of(parent, leaf)
                    for read in index.mentions(index.scope_of(parent), target)
                    if index.after(read, parent)
                )
            if isinstance(parent, cst.Element) and isinstance(index.parent(parent), (cst.Tuple, cst.List)):
                child = parent
                continue
            if isinstance(parent, (cst.Tuple, cst.List)) and isinstance(index.parent(parent), cst.Assign):
                child = parent
                continue
            if isinstance(parent, cst.CompFor) and parent.iter is child:
                child = next(a for a in index.ancestors(parent) if isinstance(a, cst.BaseComp))
                continue  # ``[features for features, _ in batch]``: one item per example of ``batch``
            if isinstance(parent, cst.Arg) and parent.value is child:
                call = index.parent(parent)
                if not isinstance(call, cst.Call):
                    return False
                if index.qualified_names(call.func) & CONVERSIONS and call.args[0] is parent:
                    child = call  # ``torch.from_numpy(x)``: the same rows, as a tensor
                    continue
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                    func = func.value
                ref = index.ref_of(func, index.scope_of(call))
                return ref is not None and ref in self.model_refs
            along = (
                (isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is child)
                or (isinstance(parent, cst.Call) and parent.func is child)
                or isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation))
            )
            if not along:
                return False
            child = parent
        return False

    def _targets_of(self, assign: cst.Assign, node: cst.CSTNode) -> list[Ref]:
        """The places ``assign`` gives ``node`` (inside its value) to: ``xb`` for ``x[i]`` in ``xb, yb = x[i], y[i]``."""
        index = self.index
        value = assign.value
        scope = index.scope_of(assign)
        found: list[Ref] = []
        for target in assign.targets:
            single: cst.BaseExpression = target.target
            if isinstance(value, (cst.Tuple, cst.List)) and isinstance(single, (cst.Tuple, cst.List)):
                pairs = list(zip(single.elements, value.elements))
                matched = [t.value for t, v in pairs if v.value is node or index.inside(node, v.value)]
                if len(single.elements) == len(value.elements) and matched:
                    single = matched[0]
            for name in assigned(single):
                ref = index.ref_of(name, scope)
                if ref is not None:
                    found.append(ref)
        return found

    def _roots(self, ref: Ref, strict: bool = False) -> set[object]:
        """What the rows of the tensor at ``ref`` come from: the places and row counts it is made of.
        ``strict``: only what gives it its rows (not the tensor whose shape sized it, ``torch.ones(x.shape[1])``;
        not the dict that holds it beside other columns, but that column)."""
        roots: set[object] = {ref}
        for assignment in self._assignments(ref):
            value = _value_of(assignment, ref)
            if value is not None:
                self._expression_roots(value, self.index.scope_of(assignment), roots, 0, strict)
        return roots

    def _expression_roots(
        self, expr: cst.BaseExpression, scope: Scope, roots: set[object], depth: int, strict: bool = False
    ) -> None:
        index = self.index
        if depth > 6:
            return
        if strict and isinstance(expr, cst.Subscript) and string_key(expr) is not None:
            item = self._dict_item(expr, scope)
            if item is not None:
                self._expression_roots(item, scope, roots, depth + 1, strict)
            return
        if strict and isinstance(expr, cst.Attribute) and expr.attr.value in ("shape", "T"):
            return
        if strict and (
            (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.MatrixMultiply))
            or (isinstance(expr, cst.Call) and index.qualified_names(expr.func) & _PRODUCTS)
        ):  # ``x @ x.T``: a matrix over pairs of samples, whose columns are samples too
            return
        if isinstance(expr, cst.Name):
            ref = index.ref_of(expr, scope)
            if ref is None or ref in roots or index.qualified_names(expr):
                return
            roots.add(ref)
            for assignment in self._assignments(ref):
                value = _value_of(assignment, ref)
                if value is not None:
                    self._expression_roots(value, index.scope_of(assignment), roots, depth + 1, strict)
        elif isinstance(expr, cst.Call):
            names = index.qualified_names(expr.func)
            positional = [a.value for a in expr.args if a.keyword is None and not a.star]
            if names & SIZED_FACTORIES and positional:
                size = positional[0]
                if isinstance(size, (cst.Tuple, cst.List)) and size.elements:
                    size = size.elements[0].value
                roots.add(("rows", _code(index, size)))
                if not strict:
                    self._expression_roots(size, scope, roots, depth + 1)
            elif names:
                for arg in positional:
                    self._expression_roots(arg, scope, roots, depth + 1, strict)
            elif isinstance(expr.func, cst.Attribute):
                self._expression_roots(expr.func.value, scope, roots, depth + 1, strict)
        elif isinstance(expr, (cst.List, cst.Tuple)):
            roots.add(("rows", str(len(expr.elements))))
        elif isinstance(expr, cst.BinaryOperation):
            self._expression_roots(expr.left, scope, roots, depth + 1, strict)
            self._expression_roots(expr.right, scope, roots, depth + 1, strict)
        elif isinstance(expr, cst.UnaryOperation):
            self._expression_roots(expr.expression, scope, roots, depth + 1, strict)
        elif isinstance(expr, cst.Comparison):
            self._expression_roots(expr.left, scope, roots, depth + 1, strict)
        elif isinstance(expr, cst.Subscript):
            self._expression_roots(expr.value, scope, roots, depth + 1, strict)
            first = expr.slice[0].slice if expr.slice else None
            if isinstance(first, cst.Index) and isinstance(first.value, cst.Name):  # data[perm]: chosen rows
                if strict and (chosen := index.ref_of(first.value, scope)) is not None:
                    roots.add(("chosen", chosen))
                self._expression_roots(first.value, scope, roots, depth + 1, strict)
        elif isinstance(expr, cst.Attribute):
            self._expression_roots(expr.value, scope, roots, depth + 1, strict)

    # -- the same data on every rank ------------------------------------------
    def _check_seeded(self, assignment: cst.CSTNode) -> None:
        """A random choice of samples in the making of the data needs a seed set before it."""
        index = self.index
        for node in index.walk(assignment):
            if not (isinstance(node, cst.Call) and (index.qualified_names(node.func) & RANDOM_CHOICES)):
                continue
            if any(a.keyword is not None and a.keyword.value in ("generator", "random_state") for a in node.args):
                continue
            if node in self.seeded_draws:
                continue
            family, hint = _family_of(index.qualified_names(node.func))
            if not self.seeding.seeded_before(node, family):
                raise Refused(
                    node,
                    f"the samples are chosen at random (`{_code(index, node.func)}`) before any seed is set, so "
                    f"each rank would choose differently: seed it first (`{hint}`)",
                )


def _family_of(names: frozenset[str]) -> tuple[str, str]:
    """The global generator a random choice by ``names`` draws from, and the seed to suggest for it."""
    if any(n.startswith(("numpy.", "sklearn.")) for n in names):
        return "numpy", "np.random.seed(0)"
    if any(n.startswith("random.") for n in names):
        return "random", "random.seed(0)"
    return "torch", "torch.manual_seed(0)"


def _is_constant(expr: cst.BaseExpression | None) -> bool:
    """A number, string or boolean, or arithmetic on them."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.UnaryOperation):
        return _is_constant(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _is_constant(expr.left) and _is_constant(expr.right)
    if isinstance(expr, cst.IfExp):  # "cuda" if torch.cuda.is_available() else "cpu"
        return _is_constant(expr.body) and _is_constant(expr.orelse)
    return False
