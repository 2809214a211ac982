"""Every op, every layout: torch's OpInfo database (op_db) as a source of cases.

Generated on demand (`harness/opinfo/`): one case per op variant, dtype,
sample and layout, named `opinfo-<op>[-<variant>]-<dtype>-s<index>-<layout>`
and tagged `opinfo`, the op's name and the layout. `--tag opinfo` runs the
`ci` sample (about 200 runs, one case per op); with `--full`, the whole sweep.
Needs the `expecttest` package: `pip install -e '.[opinfo]'`.

`KNOWN_FAILURES` below: what fails on the ci sample, each with its upstream issue.
"""

from harness import KnownFailure
from harness.opinfo import OpFailure, opinfo_source

UNREPORTED_CONJ = "cases/upstream/issue_new_fft_conj_view_copy.py (new; not yet reported upstream)"
UNREPORTED_SPLIT = "cases/upstream/issue_new_split_overlapping_input_grad.py (new; not yet reported upstream)"

KNOWN_FAILURES = (
    # torch.view_copy is decomposed into view().clone(): a layout `view` cannot take (expanded, permuted,
    # overlapping) fails in FakeTensor/the decomposition, eager's reshape fallback copies.
    OpFailure("view_copy", "https://github.com/pytorch/pytorch/issues/191136",
              KnownFailure("view_copy of a layout view() cannot take: the decomposition lacks eager's reshape fallback "
                           "(pytorch#191136, fix #191480)", device="cpu", torch="2.13"),
              layouts=("permuted", "broadcast", "overlapping")),
    # ihfft = conj(r2c FFT): the lazy conjugate view of a non-contiguous fallback result is copied to the
    # output without conjugating. The full sweep shows ifft too (its compiled result is the conjugate of eager's
    # on a permuted input, every dtype that runs).
    *(OpFailure(op, UNREPORTED_CONJ,
                KnownFailure("the conjugate view of a non-contiguous FFT result is copied without conjugating "
                             f"({UNREPORTED_CONJ})", device="cpu", torch="2.13"),
                layouts=("permuted",))
      for op in ("fft.ihfft", "fft.ifft")),
    # The outputs of split() and its kin are views of the input; AOTAutograd regenerates them from the input's
    # storage, so with an overlapping input the input gradient sums over shared addresses (aot_eager already
    # differs). The full sweep shows the whole family (dsplit, hsplit and unbind samples agree).
    *(OpFailure(op, UNREPORTED_SPLIT,
                KnownFailure(f"input gradient of {op} outputs of an overlapping input ({UNREPORTED_SPLIT})",
                             device="cpu", mode="training", torch="2.13"),
                layouts=("overlapping",))
      for op in ("split", "split.list_args", "split_with_sizes", "chunk", "unsafe_chunk", "unsafe_split")),
)

CASE_SOURCES = [opinfo_source(KNOWN_FAILURES)]
