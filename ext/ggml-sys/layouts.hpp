// ggml's quantized block types, as ggml's CPU backend declares them: bindgen reads
// their layouts from here, so elelem's kernels can check theirs against ggml's.
#include "ggml-cpu/repack.h"
