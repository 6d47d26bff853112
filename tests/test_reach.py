"""What runs (:mod:`ddpify.engine.reach`): the entry's code, what it mentions, and the modules it imports."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst

from ddpify.engine.collect import build_index
from ddpify.engine.reach import ModuleSource, Reach, reach


def program(entry: str, **modules: str) -> Reach:
    """What runs in the program of ``entry`` and ``modules`` (``pkg__sub`` names ``pkg.sub``)."""
    others = []
    for name, text in modules.items():
        dotted = name.replace("__", ".")
        package = dotted if name.endswith("__init") else dotted.rpartition(".")[0]
        dotted = dotted.removesuffix(".init")
        package = package.removesuffix(".init")
        others.append(ModuleSource(dotted, package, ast.parse(textwrap.dedent(text))))
    return reach(ModuleSource("__main__", "", ast.parse(textwrap.dedent(entry))), others)


def skipped_names(runs: Reach, module: str) -> list[str]:
    return [s.name or s.kind for s in runs.skipped.get(module, ())]


def test_functions_nothing_mentions_never_run() -> None:
    runs = program(
        """
        def helper(): pass
        def unused(): pass
        def main(): helper()
        if __name__ == "__main__":
            main()
        """
    )
    assert skipped_names(runs, "__main__") == ["unused"]


def test_a_function_mentioned_without_a_call_runs() -> None:
    runs = program(
        """
        import torch
        def init_weights(m): pass
        def collate(batch): return batch
        model = torch.nn.Linear(1, 1)
        model.apply(init_weights)
        loader = torch.utils.data.DataLoader([], collate_fn=collate)
        """
    )
    assert skipped_names(runs, "__main__") == []


def test_an_imported_module_runs_without_its_main_block() -> None:
    runs = program(
        "from model import Net\nNet()\n",
        model="""
        class Net: pass
        def test(): Net()
        if __name__ == "__main__":
            test()
        """,
    )
    assert runs.runs("model")
    assert skipped_names(runs, "model") == ["test", "if"]


def test_a_function_only_another_modules_main_block_calls_never_runs() -> None:
    runs = program(
        "import utils\nutils.used()\n",
        utils="""
        def used(): pass
        def for_the_cli(): pass
        if __name__ == "__main__":
            for_the_cli()
        """,
    )
    assert skipped_names(runs, "utils") == ["for_the_cli", "if"]


def test_a_module_imported_only_by_code_that_never_runs_is_not_loaded() -> None:
    runs = program(
        "import a\na.run()\n",
        a="""
        def run(): pass
        def never():
            import b
            b.go()
        """,
        b="def go(): pass\n",
    )
    assert runs.runs("a")
    assert not runs.runs("b")


def test_importing_a_submodule_runs_its_packages() -> None:
    runs = program("from pkg.sub import f\nf()\n", pkg__init="X = 1\n", pkg__sub="def f(): pass\ndef g(): pass\n")
    assert runs.runs("pkg") and runs.runs("pkg.sub")
    assert skipped_names(runs, "pkg.sub") == ["g"]


def test_a_reexport_through_a_package_is_followed() -> None:
    runs = program(
        "from models import Net\nNet()\n",
        models__init="from .net import Net\n",
        models__net="class Net: pass\nclass Unused: pass\n",
    )
    assert skipped_names(runs, "models.net") == ["Unused"]


def test_a_class_that_runs_keeps_its_methods_and_bases() -> None:
    runs = program(
        "from trainer import Trainer\nTrainer().fit()\n",
        trainer="""
        class Base:
            def log(self): pass
        class Trainer(Base):
            def fit(self): pass
            def evaluate(self): pass
        class Other: pass
        """,
    )
    assert skipped_names(runs, "trainer") == ["Other"]


def test_decorated_definitions_may_be_registered_so_they_run() -> None:
    runs = program(
        "import models\nmodels.create('resnet')\n",
        models="""
        REGISTRY = {}
        def register(f):
            REGISTRY[f.__name__] = f
            return f
        def create(name): return REGISTRY[name]()
        @register
        def resnet(): pass
        def plain(): pass
        """,
    )
    assert skipped_names(runs, "models") == ["plain"]


def test_decorators_known_to_neither_call_nor_register_do_not_make_a_definition_run() -> None:
    runs = program(
        """
        import functools
        import pytest
        import torch
        from pytest import mark

        @pytest.mark.parametrize("lr", [0.1, 0.01])
        def test_step(lr): pass

        @mark.skipif(True, reason="")
        @pytest.fixture
        def data(): pass

        @torch.no_grad()
        def evaluate(): pass

        @functools.lru_cache
        def cached(): pass

        @pytest.mark.slow
        @registry.register
        def registered(): pass
        """
    )
    assert skipped_names(runs, "__main__") == ["test_step", "data", "evaluate", "cached"]


def test_a_test_module_of_pytest_is_not_a_training_script() -> None:
    from ddpify import Status, convert

    test_file = textwrap.dedent(
        """
        import pytest
        import torch

        @pytest.mark.parametrize("lr", [0.1, 0.01])
        def test_one_step(lr):
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            model(torch.ones(2)).sum().backward()
            optimizer.step()
        """
    )
    converted = convert(test_file, path="tests/test_train.py")
    assert (converted.status, [d.format() for d in converted.diagnostics]) == (
        Status.UNCHANGED,
        ["tests/test_train.py:1:1: DDP011 no training step (`.backward()`) found: nothing to do"],
    )


def test_getattr_on_a_module_with_a_computed_name_runs_all_of_it() -> None:
    runs = program(
        "import sys\nimport models\ngetattr(models, sys.argv[1])()\n", models="def a(): pass\ndef b(): pass\n"
    )
    assert skipped_names(runs, "models") == []
    assert runs.dynamic == (("__main__", 3, "getattr()"),)


def test_a_computed_import_makes_every_module_run_but_the_entry_scripts_own_code() -> None:
    entry = "import importlib, sys\nimportlib.import_module(sys.argv[1])\ndef test(): pass\n"
    runs = program(entry, a="def f(): pass\n", b="y = 2\n")
    assert runs.runs("a") and runs.runs("b")
    assert (skipped_names(runs, "a"), skipped_names(runs, "__main__")) == ([], ["test"])


def test_a_star_import_is_followed() -> None:
    runs = program("from utils import *\nhelper()\n", utils="def helper(): pass\ndef other(): pass\n")
    assert skipped_names(runs, "utils") == ["other"]


def test_the_index_leaves_what_never_runs_unread() -> None:
    source = textwrap.dedent(
        """
        import torch
        def unused():
            print("never")
        def main():
            if True:
                print("runs")
        main()
        """
    )
    runs = program(source)
    module = cst.parse_module(source)
    index = build_index(module, reach=runs)
    printed = [c for c in index.calls if isinstance(c.func, cst.Name) and c.func.value == "print"]
    assert len(printed) == 1
    assert "unused" in index.identifiers  # fresh names still avoid it
    # without the model of what runs, both are read
    assert len([c for c in build_index(module).calls if isinstance(c.func, cst.Name) and c.func.value == "print"]) == 2


def test_statements_are_numbered_alike_by_both_parsers() -> None:
    source = textwrap.dedent(
        """
        import torch
        try:
            import a
        except ImportError:
            def fallback(): pass
        else:
            pass
        finally:
            pass
        for i in range(2):
            with open("f") as f:
                while False:
                    pass
        match 1:
            case 1:
                def in_case(): pass
        if 0:
            pass
        elif 1:
            def in_elif(): pass
        async def coroutine():
            async with x:
                async for y in z:
                    pass
        def last(): pass
        last()
        """
    )
    runs = program(source)
    assert skipped_names(runs, "__main__") == ["fallback", "in_case", "in_elif", "coroutine"]
    index = build_index(cst.parse_module(source), reach=runs)
    defined = {key[1] for key in index.functions}
    assert defined == {"last"}


def test_a_name_the_module_defines_hides_the_same_name_from_a_star_import() -> None:
    runs = program(
        "from models import *\ndef test(): pass\nnet = Net()\ntest()\n",
        models__init="from .net import *\n",
        models__net="class Net: pass\ndef test(): Net()\n",
    )
    assert skipped_names(runs, "models.net") == ["test"]


MODULE_WITH_ITS_OWN_LOOP = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def forward(self, x): return self.body(self._scaled(x))
        def _scaled(self, x): return x
        def train(self, mode=True): return super().train(mode)
        def compile(self): self.opt = torch.optim.Adam(self.parameters())
        def fit(self, x): self.opt.step()
        def predict(self, x): return self(x)

    class Deeper(Net):
        def fit_twice(self, x): pass

    class Data(torch.utils.data.Dataset):
        def fit(self): pass
"""


def test_a_modules_methods_run_where_running_code_names_them() -> None:
    runs = program(
        "from model import Net, Deeper, Data\nnet, deeper, data = Net(), Deeper(), Data()\nnet.predict(1)\n",
        model=MODULE_WITH_ITS_OWN_LOOP,
    )
    # forward, a method it calls, nn.Module's own train() and the method the entry calls run; a class that is
    # not nn.Module's alone (a Dataset) keeps every method
    assert skipped_names(runs, "model") == ["compile", "fit", "fit_twice"]


def test_a_method_named_by_a_string_or_a_computed_name_runs() -> None:
    by_string = program("from model import Net\nnet = Net()\ngetattr(net, 'fit')(1)\n", model=MODULE_WITH_ITS_OWN_LOOP)
    assert skipped_names(by_string, "model") == ["compile", "predict", "Deeper", "Data"]
    computed = program(
        "import sys\nfrom model import Net\nnet = Net()\ngetattr(net, sys.argv[1])()\n", model=MODULE_WITH_ITS_OWN_LOOP
    )
    assert skipped_names(computed, "model") == ["Deeper", "Data"]
