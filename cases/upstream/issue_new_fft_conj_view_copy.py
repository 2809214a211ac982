"""new (not yet reported): [inductor][cpu] a conjugate view copied into a non-contiguous graph output loses its conjugation.

Found by the OpInfo sweep (`opinfo-fft_ihfft-bool-s0-permuted`: `torch.fft.ihfft(x, n=10, dim=1)`
of a column-major (5, 6, 7) input; no upstream issue found for it yet).

`torch.fft.rfft(x, n=4, dim=1).conj()` of a (2, 3, 4) float32 input stored
column-major (`x.permute(2, 1, 0).contiguous().permute(2, 1, 0)`): the FFT is
an extern fallback (`aten._fft_r2c`) whose result is not contiguous, `conj()`
stays a lazy conjugate view (`aten._conj`), and Inductor writes the graph
output with a copy kernel (`cpp_fused__conj_*`) that reads the view's memory as
it is stored, ignoring its conjugate bit: every imaginary part has the wrong
sign. Eager, `aot_eager_decomp_partition`, a contiguous input, or no padding
(`n` equal to the size) give the right values. `ihfft` (= conj of an r2c FFT)
and `fft(...).conj()` of a complex input fail the same way. Seen on torch
2.13.0+cpu; CUDA not verified.
"""

import torch

from harness import KnownFailure, Program, case, permuted

ISSUE = "new: not yet reported upstream (found by the OpInfo sweep, fft.ihfft on a permuted input)"


def rfft_then_conj(x):
    return torch.fft.rfft(x, n=4, dim=1).conj()


@case(
    tags=("upstream", "inductor", "fft", "complex", "layout", "conj"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten._conj",
    known_failures=(
        KnownFailure(
            "Inductor copies the lazy conjugate view of a non-contiguous FFT result without conjugating "
            "(new upstream bug, found by the OpInfo sweep)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "Inductor fails to compile it on CUDA: Triton has no complex64 pointer type "
            "(InductorError: KeyError 'complex64' in signature_of)",
            device="cuda",
            torch="2.11",
        ),
    ),
)
def upstream_new_fft_conj_view_copy(dtype):
    """rfft(x, n=4, dim=1).conj() of a column-major (2, 3, 4) input: compiled returns the unconjugated values."""
    return Program(rfft_then_conj, [permuted((4, 3, 2), (2, 1, 0))])
