"""The trial scripts (``tests/trial``): what ddpify does with each, and that what it writes trains in data-parallel.

Each script's expected outcome is recorded in ``OUTCOMES``: ``CONVERTED`` with
the codes of the warnings and notes it reports, or the code of the error that
refuses it. The fast
test converts every script and checks that outcome, and that the output keeps
the invariants of :mod:`ddpify.invariants`. The ``torchrun`` test runs each
converted script to the end on two ranks (Gloo on CPU) under
``ddpify.verify``: ranks in sync, data sharded, one writer, clean exit
(about 10 s each). README's test command runs one of them (see
``QUICK_TORCHRUN`` in ``conftest.py``); ``pytest -m exhaustive`` runs the
others.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddpify import convert
from ddpify.diagnostics import Severity
from ddpify.invariants import check
from ddpify.result import Status
from ddpify.verify import VerifyReport, verify

TRIAL = Path(__file__).parent / "trial"
CONVERTED = "converted"

# script -> CONVERTED (with the codes of these warnings and notes), or the code of the error that refuses it
OUTCOMES: dict[str, tuple[str, ...]] = {
    "s01_amp": (CONVERTED,),
    "s02_schedulers": (CONVERTED,),
    "s03_clip_accum": (CONVERTED,),
    "s04_ema": (CONVERTED,),
    "s05_compile_cl": (CONVERTED,),
    "s06_split_collate": (CONVERTED,),
    "s07_early_stop": (CONVERTED,),
    "s08_ckpt_resume": (CONVERTED,),
    "s09_finetune_frozen": (CONVERTED,),
    "s09b_filter_frozen": (CONVERTED,),
    "s10_unused_branch": (CONVERTED,),
    "s11_bn_cnn": (CONVERTED, "DDP308"),  # a note: BatchNorm over small per-rank batches
    "s12_simclr": (CONVERTED, "DDP311"),
    "s13_iter_based": (CONVERTED,),
    "s14_functions": (CONVERTED,),
    "s15_trainer_class": (CONVERTED,),
    "s16_lstm_lm": (CONVERTED,),  # the hidden state carried across batches: a contiguous run of batches per rank
    "s17_vae": (CONVERTED,),
    "s18_logging_csv": (CONVERTED,),
    "s19_tqdm": (CONVERTED,),
    "s20_val_test": (CONVERTED,),
    "s21_external_model": (CONVERTED,),
    "s22a_opt_before_move": (CONVERTED,),
    "s22b_move_late": (CONVERTED,),
}
# Fewer epochs or steps where the script takes them as arguments: the run stays complete, only shorter.
ARGS: dict[str, list[str]] = {
    "s01_amp": ["--epochs", "1"],
    "s02_schedulers": ["--epochs", "1"],
    "s08_ckpt_resume": ["--epochs", "2"],
    "s13_iter_based": ["--max-steps", "40"],
    "s14_functions": ["--epochs", "1", "--device", "cpu"],
    "s21_external_model": ["--epochs", "1"],
}
# Scripts whose converted form is known not to train correctly yet: script -> what is wrong.
# strict: the test fails as soon as it passes, so that the entry is removed with the fix.
KNOWN_WRONG: dict[str, str] = {}


def scripts(*, converted_only: bool = False) -> list[object]:
    params = []
    for name, outcome in OUTCOMES.items():
        if converted_only and outcome[0] != CONVERTED:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[name])] if name in KNOWN_WRONG else []
        params.append(pytest.param(name, marks=marks))
    return params


def test_the_table_names_every_trial_script() -> None:
    assert sorted(OUTCOMES) == sorted(p.stem for p in TRIAL.glob("s*.py"))


@pytest.mark.parametrize("name", scripts())
def test_conversion_outcome(name: str) -> None:
    path = TRIAL / f"{name}.py"
    result = convert(path.read_text(), path=str(path))

    errors = [d.code for d in result.diagnostics if d.severity is Severity.ERROR]
    reported = [d.code for d in result.diagnostics if d.severity is not Severity.ERROR]
    if OUTCOMES[name][0] == CONVERTED:
        assert (result.status, errors) == (Status.CONVERTED, []), [d.format() for d in result.diagnostics]
        assert sorted(reported) == sorted(OUTCOMES[name][1:])
        assert isinstance(result.code, str)
        assert check(result.code, str(path)) == []
    else:
        assert result.status is Status.REFUSED
        assert errors == list(OUTCOMES[name])


def explain(report: VerifyReport) -> str:
    return f"{report.format_table()}\n--- torchrun output ---\n{report.output[-4000:]}"


@pytest.mark.torchrun
@pytest.mark.parametrize("name", scripts(converted_only=True))
def test_converted_script_trains_in_data_parallel(name: str, tmp_path: Path) -> None:
    if name == "s19_tqdm":
        pytest.importorskip("tqdm")
    source = TRIAL / f"{name}.py"
    result = convert(source.read_text(), path=str(source))
    assert result.status is Status.CONVERTED and isinstance(result.code, str)
    script = tmp_path / f"{name}.py"
    script.write_text(result.code)
    shutil.copy(TRIAL / "models.py", tmp_path)

    report = verify(script, nproc=2, script_args=ARGS.get(name, []), workdir=tmp_path, timeout=120)

    assert report.ok, explain(report)
