"""ddpify.concerns.model: which models an optimizer trains, and where each is ready to wrap."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import model

TRAIN = """
import torch
import torch.nn as nn

def main():
    net = nn.Linear(4, 1)
    net = net.cuda()
    net.load_state_dict(torch.load("init.pt"))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    torch.save(net.state_dict(), "net.pt")
"""


def test_the_model_is_what_the_optimizer_steps_whatever_its_name(read) -> None:
    program = read(TRAIN)
    (found,) = model.find(program).models
    assert found.expression == "net"
    assert found.on_cuda and found.placed
    # the wrap follows the checkpoint load and the optimizer, which still see the plain module
    assert code(program, found.insert_after) == "opt = torch.optim.SGD(net.parameters(), lr=0.1)"
    assert [code(program, read) for read in found.unwrap] == ["net"]  # net.state_dict() after the wrap
    assert codes(program) == []


def test_a_model_held_by_a_trainer_is_written_with_self(read) -> None:
    program = read(
        """
        import torch
        class Trainer:
            def __init__(self, model, device):
                self.model = model.to(device)
                self.optimizer = torch.optim.Adam(self.model.parameters())
            def step(self, x):
                self.model(x).sum().backward()
        """
    )
    (found,) = model.find(program).models
    assert found.expression == "self.model"
    assert not found.on_cuda


def test_data_parallel_is_where_the_model_is_ready(read) -> None:
    program = read(
        """
        import torch
        model = Net().to(device)
        if torch.cuda.device_count() > 1:
            model = torch.nn.DataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(x).sum().backward()
        """
    )
    facts = model.find(program)
    (found,) = facts.models
    assert found.data_parallel is not None and found.data_parallel_if is not None
    assert len(facts.data_parallel) == 1


def test_an_optimizer_over_something_untraceable_is_refused(read) -> None:
    program = read(
        """
        import torch
        optimizer = torch.optim.SGD(get_params(), lr=0.1)
        loss.backward()
        """
    )
    assert model.find(program).models == ()
    assert codes(program) == ["DDP301"]


def test_training_without_an_optimizer_in_the_file_is_refused(read) -> None:
    program = read(
        """
        from lib import build
        model, optimizer = build()
        model(x).sum().backward()
        """
    )
    assert model.find(program).models == ()
    assert codes(program) == ["DDP304"]


def test_a_method_whose_result_the_backward_pass_differentiates_runs_through_the_wrapper(read) -> None:
    program = read(
        """
        import torch
        class Net(torch.nn.Module):
            def embed(self, x):
                return self.encoder(x)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            z = model.embed(x)
            loss = z.pow(2).mean()
            (model(x).sum() + loss).backward()
        """
    )
    (found,) = model.find(program).models
    assert [code(program, call) for call in found.through_forward] == ["model.embed(x)"]
    assert [code(program, read) for read in found.unwrap] == []
    assert codes(program) == []


def test_a_method_whose_result_cannot_be_followed_to_the_backward_pass_is_reported(read) -> None:
    program = read(
        """
        import torch
        class Net(torch.nn.Module):
            def embed(self, x):
                return self.encoder(x)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model.embed(x)
            model.cache.sum().backward()
        """
    )
    (found,) = model.find(program).models
    assert found.through_forward == ()
    assert codes(program) == ["DDP303"]


def test_a_method_without_gradients_is_neither_routed_nor_reported(read) -> None:
    program = read(
        """
        import torch
        class Net(torch.nn.Module):
            @torch.no_grad()
            def sample(self, x):
                return self.encoder(x)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
            model.sample(x)
        """
    )
    (found,) = model.find(program).models
    assert found.through_forward == ()
    assert [code(program, read) for read in found.unwrap] == ["model"]
    assert codes(program) == []


def _optimizer_over(params: str) -> str:
    return f"""
        import itertools
        import torch
        import torch.nn as nn

        enc = nn.Linear(4, 2).to("cpu")
        dec = nn.Linear(2, 4).to("cpu")
        head = nn.Linear(2, 1).to("cpu")
        opt = torch.optim.Adam({params})
        for x in loader:
            opt.zero_grad()
            head(dec(enc(x))).sum().backward()
            opt.step()
        """


def test_every_model_whose_parameters_an_optimizer_holds_is_wrapped(read) -> None:
    for params in (
        "itertools.chain(enc.parameters(), dec.parameters(), head.parameters())",
        "list(enc.parameters()) + list(dec.parameters()) + list(head.parameters())",
        '[{"params": enc.parameters()}, {"params": [p for p in dec.parameters()], "lr": 1e-4}, '
        '{"params": filter(lambda p: p.requires_grad, head.parameters())}]',
    ):
        program = read(_optimizer_over(params))
        assert [found.expression for found in model.find(program).models] == ["enc", "dec", "head"], params
        assert codes(program) == []


def test_a_parameter_list_filled_in_a_loop_is_traced_to_its_model(read) -> None:
    program = read(
        """
        import torch
        import torch.nn as nn

        net = nn.Linear(4, 1).to("cpu")
        decay, rest = [], []
        for name, p in net.named_parameters():
            (rest if name.endswith("bias") else decay).append(p)
        opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}])
        for x in loader:
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
        """
    )
    assert [found.expression for found in model.find(program).models] == ["net"]
    assert codes(program) == []


def test_a_parameter_not_from_a_model_is_refused_by_name(read) -> None:
    for params, piece in (
        (
            "list(enc.parameters()) + [scale]",
            "scale",
        ),
        ("[{'params': enc.parameters()}, {'params': [scale]}]", "scale"),
        ("nn.Linear(2, 2).parameters()", ""),
    ):
        program = read(
            _optimizer_over(params).replace("opt = ", "scale = torch.ones(1, requires_grad=True)\n        opt = ")
        )
        model.find(program)
        assert codes(program) == ["DDP301"], params
        assert piece in program.findings[0][2]


def _with_forward(body: str, call: str = "net(x)") -> str:
    return f"""
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 4)
                self.aux = nn.Linear(4, 1)
                self.use_aux = True

            def forward(self, x, with_aux=False):
{body}

        net = Net().to("cpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in loader:
            opt.zero_grad()
            {call}.sum().backward()
            opt.step()
        """


def test_a_submodule_run_only_on_some_calls_needs_find_unused_parameters(read) -> None:
    for body in (
        "                h = self.body(x)\n                return self.aux(h) if with_aux else h",
        "                h = self.body(x)\n                if with_aux:\n                    return self.aux(h)\n"
        "                return h",
    ):
        (found,) = model.find(read(_with_forward(body, "net(x, with_aux=True)"))).models
        assert found.unused is not None and "self.aux" in found.unused and "with_aux" in found.unused


def test_a_submodule_run_in_every_training_step_leaves_no_parameter_unused(read) -> None:
    body = "                h = self.body(x)\n                if self.training:\n                    h = h + self.aux(h)\n                return h"
    (found,) = model.find(read(_with_forward(body))).models
    assert found.unused is None


def test_a_submodule_behind_a_flag_of_the_module_may_never_get_a_gradient(read) -> None:
    for test in ("self.use_aux", "not self.training and self.use_aux"):
        body = f"                h = self.body(x)\n                if {test}:\n                    h = h + self.aux(h)\n                return h"
        (found,) = model.find(read(_with_forward(body))).models
        assert found.unused == f"`self.aux` runs only when `{test}` holds", test


def test_a_read_guarded_by_hasattr_asks_the_same_object_as_its_test(read) -> None:
    program = read(
        """
        import torch
        import torch.nn as nn

        net = nn.Linear(4, 1).to("cpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in loader:
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
        inner = net.moduel if hasattr(net, "moduel") else net
        torch.save(net.state_dict(), "net.pt")
        """
    )
    (found,) = model.find(program).models
    # ``hasattr(net.module, "moduel")`` and ``net.module.moduel``: the test and the read agree
    assert [code(program, program.index.parent(read)) for read in found.unwrap] == [
        "net.moduel",
        "net,",
        "net.state_dict",
    ]


def test_the_unwrap_idiom_keeps_asking_the_wrapper(read) -> None:
    program = read(
        """
        import torch
        import torch.nn as nn

        net = nn.Linear(4, 1).to("cpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in loader:
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
        inner = net.module if hasattr(net, "module") else net
        torch.save(inner.state_dict(), "net.pt")
        """
    )
    (found,) = model.find(program).models
    assert found.unwrap == ()


def test_a_parameter_list_extended_with_another_model_wraps_both(read) -> None:
    program = read(
        _optimizer_over("params").replace(
            "opt = ",
            "params = list(enc.parameters())\n        params += list(dec.parameters()) + list(head.parameters())\n        opt = ",
        )
    )
    assert [found.expression for found in model.find(program).models] == ["enc", "dec", "head"]
    assert codes(program) == []


def test_requires_grad_toggled_every_step_needs_no_new_wrap(read) -> None:
    program = read(
        """
        import torch
        import torch.nn as nn

        gen = nn.Linear(2, 2).to("cpu")
        disc = nn.Linear(2, 1).to("cpu")
        opt_g = torch.optim.Adam(gen.parameters())
        opt_d = torch.optim.Adam(disc.parameters())
        for x in loader:
            for p in disc.parameters():
                p.requires_grad = True
            opt_d.zero_grad()
            disc(x).mean().backward()
            opt_d.step()
            for p in disc.parameters():
                p.requires_grad = False
            opt_g.zero_grad()
            disc(gen(x)).mean().backward()
            opt_g.step()
        """
    )
    assert [found.rewraps for found in model.find(program).models] == [(), ()]
    assert codes(program) == []


ENSEMBLE = """
import torch
import torch.nn as nn

def main(loader, k):
    nets = [nn.Linear(4, 1).cuda() for _ in range(k)]
    opts = [torch.optim.SGD(net.parameters(), lr=0.1) for net in nets]
    for x, y in loader:
        for net, opt in zip(nets, opts):
            opt.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    torch.save([n.state_dict() for n in nets], "nets.pt")
    torch.save(nets[0].state_dict(), "first.pt")
"""


def test_models_built_in_a_list_are_wrapped_together_once_the_list_is_ready(read) -> None:
    program = read(ENSEMBLE)
    (found,) = model.find(program).models
    assert (found.expression, found.item, found.on_cuda) == ("nets", "net", True)
    assert code(program, found.insert_after).startswith("opts = [")
    # models taken out of the list after the wrap: through a loop variable of any name, or by index
    assert [code(program, read) for read in found.unwrap] == ["n", "nets[0]"]
    assert codes(program) == []


def test_an_optimizer_over_a_model_taken_by_index_trains_the_whole_list(read) -> None:
    program = read(
        ENSEMBLE.replace("SGD(net.parameters(), lr=0.1) for net in nets", "SGD(nets[i].parameters()) for i in range(k)")
    )
    (found,) = model.find(program).models
    assert (found.expression, found.item) == ("nets", "model")


def test_a_list_of_models_that_also_have_names_of_their_own_is_not_wrapped_as_a_list(read) -> None:
    # ``nets = [DDP(n) for n in nets]`` would leave ``a`` and ``b`` unwrapped
    program = read(
        """
        import torch
        a, b = Net(), Net()
        nets = [a, b]
        opts = [torch.optim.SGD(n.parameters()) for n in nets]
        for x in loader:
            for n, opt in zip(nets, opts):
                n(x).sum().backward()
                opt.step()
        """
    )
    assert not model.find(program).models
    assert codes(program) == ["DDP302"]


def test_a_list_taken_under_another_name_once_ready_names_the_wrapped_models(read) -> None:
    program = read(
        ENSEMBLE.replace("    opts = [", "    ensemble = nets\n    opts = [").replace(
            "zip(nets, opts)", "zip(ensemble, opts)"
        )
    )
    (found,) = model.find(program).models
    assert code(program, found.insert_after).startswith("opts = [")
    assert found.realiased == (("ensemble", "nets"),)  # taken again after the wrap
    assert codes(program) == []


def test_a_model_taken_under_another_name_before_it_is_replaced_is_refused(read) -> None:
    """``other`` keeps the module that ``nn.Sequential(net)`` now holds inside: not the model that is wrapped."""
    single = ENSEMBLE.replace(
        "    nets = [nn.Linear(4, 1).cuda() for _ in range(k)]\n",
        "    net = nn.Linear(4, 1)\n    other = net\n    net = nn.Sequential(net).cuda()\n    nets = [net]\n",
    ).replace("zip(nets, opts)", "zip([other], opts)")
    program = read(single)
    model.find(program)
    assert codes(program) == ["DDP307"]


GAN = """
import torch
import torch.nn as nn

class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = nn.Linear(4, 8)
        self.discriminator = nn.Linear(8, 1)

    def forward(self, z):
        return self.discriminator(self.generator(z))

def main(loader):
    gan = GAN()
    opt_g = torch.optim.Adam(gan.generator.parameters())
    opt_d = torch.optim.Adam(gan.discriminator.parameters())
    for (z,) in loader:
        loss = STEP
        loss.backward()
        opt_g.step()
        opt_d.step()
"""


def test_parts_with_their_own_optimizers_wrap_the_model_once_when_its_forward_runs_them(read) -> None:
    program = read(GAN.replace("STEP", "gan(z).mean()"))
    (found,) = model.find(program).models
    assert found.expression == "gan"
    assert code(program, found.insert_after) == "opt_d = torch.optim.Adam(gan.discriminator.parameters())"
    assert codes(program) == []


def test_parts_run_directly_by_the_training_step_are_refused(read) -> None:
    program = read(GAN.replace("STEP", "gan.discriminator(gan.generator(z)).mean()"))
    assert not model.find(program).models
    assert codes(program) == ["DDP310"]


def test_the_wrap_comes_before_training_even_where_the_loop_never_names_the_model(read) -> None:
    program = read(
        """
        import torch
        model = Net()
        opt = torch.optim.SGD(model.parameters())
        for x in loader:
            run(x).backward()
            opt.step()
        model.eval()
        """
    )
    (found,) = model.find(program).models
    assert code(program, found.insert_after) == "opt = torch.optim.SGD(model.parameters())"


CLIP = """
import torch
import torch.nn as nn

def main(loader):
    images = nn.Linear(8, 4)
    texts = nn.Linear(6, 4)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(list(images.parameters()) + list(texts.parameters()))
    for x, t in loader:
        logits = images(x) @ texts(t).T
        labels = torch.arange(len(x)).to(logits.device)
        loss = (criterion(logits, labels) + criterion(logits.T, labels)) / 2
        loss.backward()
        opt.step()
"""


def test_a_loss_over_in_batch_negatives_is_noted_once(read) -> None:
    program = read(CLIP)
    model.find(program)
    assert codes(program) == ["DDP311"]


def test_arange_labels_under_no_grad_or_class_labels_are_not_in_batch_negatives(read) -> None:
    program = read(
        CLIP.replace(
            "        loss = (", "        with torch.no_grad():\n            criterion(logits, labels)\n        loss = ("
        ).replace("criterion(logits, labels) + criterion(logits.T, labels)", "criterion(logits, t) + 0")
    )
    model.find(program)
    assert codes(program) == []
