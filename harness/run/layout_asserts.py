"""A divergence told by Inductor's own layout asserts, where the compile turned them off.

The kernels after a fallback call address its result with the strides its meta kernel gave, and Inductor's
wrapper asserts that the result has them (`config.size_asserts`, `inductor_compat.size_asserts`). torch_npu's
`triton_experimental` turns the asserts off as it loads (its `_activate`), so a fallback whose kernel returns
another layout is read with the wrong strides without a word, and the first kernel that reads it diverges on
eager values of its inputs. A diverging run whose compile had them off is compiled again with them on (the
compile option `size_asserts=True`, nothing else changed); where an assert fails, its op and the strides it
names are the answer (`FALLBACK_LAYOUT`, a record's `mechanism`). A fallback's layout is what the device's
kernel decides: on the CPU surrogate the CPU kernel's, computed on host copies of the inputs.
"""

from __future__ import annotations

from harness import records as R
from harness.inductor_compat.size_asserts import CONFIG_KEY, SIZE_ASSERTS_OPTION, layout_assert
from harness.run.config import RunConfig
from harness.run.sides import EagerSide, compile_kwargs

FALLBACK_LAYOUT = "fallback-layout"


def fallback_layout_answer(eager_side: EagerSide, config: RunConfig, record: R.CaseResult) -> R.Localization | None:
    """The fallback whose result's layout is not its meta's, for a diverging run compiled with Inductor's size
    asserts off (as a localization's answer); None where they were on, or compiled with them on the run raises
    no such assert."""
    if record.compile_config.get(CONFIG_KEY, True) is not False:
        return None
    options = {**record.compile_options, SIZE_ASSERTS_OPTION: True}
    try:
        eager_side.compiled_session(config.backend, **compile_kwargs(config, options)).run()
        return None
    except Exception as exc:  # noqa: BLE001 - the assert, or anything else (no answer)
        found = layout_assert(exc)
    if found is None:
        return None
    op = found.op or "a fallback"
    return R.Localization(
        answer=R.Answer.KERNEL,
        diverged=True,
        name=op,
        kind="fallback",
        stage="inductor",
        isolated=(
            f"fallback layout is wrong, not a kernel's code: compiled again with Inductor's size_asserts on (this "
            f"compile had them off), the wrapper's assert_size_stride stops after {op}: {found.said} (each pair: "
            "the result's, then its meta's); the code after it addresses the result with the meta's strides"
        ),
    )
